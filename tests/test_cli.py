"""The CLI contract: every sub-command exists with --help; stubs exit 2; bad settings exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dprobe.cli import COMMANDS, main


def _dprobe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dprobe.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_top_level_help_lists_every_command() -> None:
    res = _dprobe("--help")
    assert res.returncode == 0
    for name in COMMANDS:
        assert name in res.stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_explains_itself(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"dprobe {name}" in out
    assert len(out.splitlines()) > 3


def test_unknown_command_is_bad_usage() -> None:
    res = _dprobe("frobnicate")
    assert res.returncode == 2
    assert "invalid choice" in res.stderr


def test_bad_setting_in_environment_exits_2_naming_it() -> None:
    import os

    env = {**os.environ, "DPROBE_BROKER_PORT": "not-a-port"}
    res = _dprobe("broker", "status", env=env)
    assert res.returncode == 2
    assert "DPROBE_BROKER_PORT" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
