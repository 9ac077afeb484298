"""``dprobe config check`` without a settings file says it checked no file: every service
is then ``ok`` whatever file the user meant to check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dprobe.cli import main

NOTE = (
    "dprobe config: no settings file given (--config FILE or DPROBE_CONFIG): checked the "
    "defaults and the environment only"
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("DPROBE_") and k != "DPROBE_TRACE_DIR"]:
        monkeypatch.delenv(key)


def test_check_without_a_file_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check"]) == 0
    out, err = capsys.readouterr()
    assert "[collector] ok" in out.splitlines()
    assert NOTE in err.splitlines()


def test_check_of_a_file_given_says_nothing_of_the_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "dprobe.toml"
    settings.write_text("[collector]\ninterval_s = 5.0\n")
    assert main(["config", "check", "--config", str(settings)]) == 0
    assert "no settings file" not in capsys.readouterr().err
    monkeypatch.setenv("DPROBE_CONFIG", str(settings))
    assert main(["config", "check"]) == 0
    assert "no settings file" not in capsys.readouterr().err
