"""Settings naming a folder or file the service cannot even look at: exit 2, not a traceback.

A service's dynamic user (systemd ``DynamicUser=``) may not enter a root-only folder, and a
path may hold a name longer than a file name allows. Both make ``stat`` fail with an error
other than "no such file"; the setting is refused naming it and the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dprobe.cli import main
from dprobe.config import BrokerSettings, CollectorSettings, ConfigError, KafkaSettings, load
from tests.as_nobody import run_as_nobody

TOO_LONG = "a" * 300  # a file name holds at most 255 bytes


def _refusal_as_nobody(build: Callable[[], object]) -> str:
    """``build()`` run as an unprivileged user: the refusal, or ``ok``."""
    with contextlib.suppress(Exception):  # import what it needs: the child may not read it
        build()

    def body() -> str:
        try:
            build()
        except ConfigError as exc:
            return f"ConfigError: {exc}"
        return "ok"

    return run_as_nobody(body)


@pytest.fixture
def root_only() -> Iterator[Path]:
    """A folder the unprivileged user of ``_refusal_as_nobody`` may not enter, with a file.

    Root's own folder of mode 0700 (as /var/lib/private is), in a world-readable
    temporary folder; a user who is not root takes its own access away (mode 0).
    """
    base = Path(tempfile.mkdtemp(prefix="dprobe-test-"))
    base.chmod(0o755)
    folder = base / "root-only"
    folder.mkdir()
    (folder / "ca.pem").write_text("not read\n")
    folder.chmod(0o700 if os.geteuid() == 0 else 0o000)
    try:
        yield folder
    finally:
        folder.chmod(0o700)
        shutil.rmtree(base)


@pytest.mark.parametrize("name", ["spool_dir", "state_dir"])
def test_a_collector_folder_under_one_the_user_may_not_enter_is_refused(
    name: str, root_only: Path
) -> None:
    folder = root_only / "spool"
    elsewhere = str(root_only.parent / "open")  # the other folder: one the user may make
    cli = {"spool_dir": elsewhere, "state_dir": elsewhere, name: str(folder)}
    out = _refusal_as_nobody(lambda: load(CollectorSettings, cli=cli))
    assert out.startswith(f"ConfigError: collector.{name}: {folder}: Permission denied"), out
    assert f"may not enter {root_only}" in out


def test_a_tls_file_in_a_folder_the_user_may_not_enter_is_refused(root_only: Path) -> None:
    ca = root_only / "ca.pem"
    out = _refusal_as_nobody(
        lambda: load(
            KafkaSettings,
            env={"DPROBE_KAFKA_SECURITY_PROTOCOL": "SSL", "DPROBE_KAFKA_SSL_CAFILE": str(ca)},
        )
    )
    assert out.startswith(f"ConfigError: kafka.ssl_cafile: {ca}: Permission denied"), out


def test_a_tls_key_only_its_owner_may_read_is_refused_naming_it(root_only: Path) -> None:
    """The client key left root-only (0600) without handing it over as a credential."""
    key = root_only.parent / "client.key"  # in a folder every user may enter
    key.write_text("not read\n")
    key.chmod(0o600 if os.geteuid() == 0 else 0o000)
    env = {"DPROBE_KAFKA_SECURITY_PROTOCOL": "SSL", "DPROBE_KAFKA_SSL_KEYFILE": str(key)}
    out = _refusal_as_nobody(lambda: load(KafkaSettings, env=env))
    assert out.startswith(f"ConfigError: kafka.ssl_keyfile: {key}: cannot read: "), out
    assert "Permission denied" in out


@pytest.mark.parametrize(
    ("cls", "name"),
    [
        (CollectorSettings, "spool_dir"),
        (CollectorSettings, "state_dir"),
        (BrokerSettings, "state_dir"),
        (BrokerSettings, "lib_dir"),
    ],
)
def test_a_folder_with_a_name_too_long_is_refused_naming_the_setting(
    cls: type, name: str, tmp_path: Path
) -> None:
    folder = tmp_path / TOO_LONG / "x"
    section = cls.__name__.removesuffix("Settings").lower()
    with pytest.raises(ConfigError, match=rf"^{section}\.{name}: .*: File name too long"):
        load(cls, cli={name: str(folder)})


def test_a_tls_file_with_a_name_too_long_is_refused(tmp_path: Path) -> None:
    env = {"DPROBE_KAFKA_SECURITY_PROTOCOL": "SSL", "DPROBE_KAFKA_SSL_CAFILE": f"/{TOO_LONG}"}
    with pytest.raises(ConfigError, match=r"^kafka\.ssl_cafile: .*: File name too long"):
        load(KafkaSettings, env=env)


def test_collect_with_such_a_spool_dir_exits_2_in_one_line(capsys, tmp_path: Path) -> None:
    argv = ["collect", "--backend", "synthetic", "--spool-dir", str(tmp_path / TOO_LONG)]
    assert main([*argv, "--no-send", "--max-ticks", "1", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dprobe collect: collector.spool_dir: "), err
    assert "File name too long" in err[0] and "--spool-dir" in err[0]
