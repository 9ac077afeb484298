"""A settings file's value of the wrong type, or an unknown key, is named with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.cli import main


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in [k for k in os.environ if k.startswith("DPROBE_") and k != "DPROBE_TRACE_DIR"]:
        monkeypatch.delenv(key)


def test_config_check_names_the_line_of_each_unreadable_value_and_unknown_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        "# fleet settings\n"
        "[kafka]\n"
        'bootstrap = "k1:9092"\n'
        "request_timeout_ms = 'soon'\n"
        "\n"
        "[worker]\n"
        "window_s = 60\n"
        "grace_s = 'ten'\n"
        "windw_s = 30\n"
    )
    assert main(["config", "check", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "[kafka] request_timeout_ms: expected an integer, got 'soon' (line 4)" in err
    assert "[worker] grace_s: expected a number, got 'ten' (line 8)" in err
    assert "[worker] has unknown settings: windw_s (did you mean window_s?) (line 9)" in err
