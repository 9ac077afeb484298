"""``dprobe config check FILE``: the settings file given where a SERVICE goes is named as
such, with the command that checks it (``--config FILE``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.cli import main


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize("action", ["check", "show"])
def test_a_settings_file_given_as_the_service_names_the_command_that_reads_it(
    action: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "collector.toml"
    settings.write_text('[collector]\nbackend = "nvml"\n')
    err = _usage_error(["config", action, str(settings)], capsys)
    assert err == (
        f"dprobe config: {str(settings)!r} is a settings file, not a SERVICE: give it with "
        f"--config (dprobe --config {settings} config {action}) (see: dprobe config --help)"
    )


def test_a_file_name_that_does_not_exist_is_named_so_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _usage_error(["config", "check", "/etc/dprobe/nothing-here.toml"], capsys)
    assert "'/etc/dprobe/nothing-here.toml' is a settings file, not a SERVICE" in err


def test_a_misspelt_service_is_still_an_invalid_choice(capsys) -> None:
    err = _usage_error(["config", "show", "collecter"], capsys)
    assert err.startswith("dprobe config: argument SERVICE: invalid choice: 'collecter'")
    assert "'collector'" in err
