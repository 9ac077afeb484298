"""``dprobe config check`` warns of a relative path in a settings file: a service takes it
from the folder it starts in (``/`` under systemd), so the check, run elsewhere, would
pass on a file the service does not open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dprobe.cli import main


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("DPROBE_") and k != "DPROBE_TRACE_DIR"]:
        monkeypatch.delenv(key)


def _warning(setting: str, value: str, settings: Path, cwd: Path) -> str:
    return (
        f"dprobe config: warning: {setting} = {value!r} (config file {settings}) is a "
        f"relative path: a service takes it from the folder it starts in (here {cwd}; / "
        "under systemd): write it in full"
    )


def test_relative_paths_of_a_file_are_warned_of_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tenants.toml").write_text('[namespaces]\nteam = "vc-a"\n')
    settings = tmp_path / "collector.toml"
    settings.write_text(
        '[collector]\ntenant_map = "tenants.toml"\nspool_dir = "spool"\n'
        f'state_dir = "{tmp_path / "state"}"\n'
    )
    assert main(["config", "check", "--config", str(settings)]) == 0
    err = capsys.readouterr().err.splitlines()
    relative = [line for line in err if "relative path" in line]
    assert relative == [
        _warning("collector.spool_dir", "spool", settings, tmp_path),
        _warning("collector.tenant_map", "tenants.toml", settings, tmp_path),
    ]


def test_paths_written_in_full_or_by_default_are_not_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "collector.toml"
    settings.write_text(f'[collector]\nspool_dir = "{tmp_path / "spool"}"\n')
    assert main(["config", "check", "--config", str(settings)]) == 0
    assert "relative path" not in capsys.readouterr().err  # archive.out_dir's default too
