"""An empty --config (an unset shell variable) is refused, not read as "no file"."""

from __future__ import annotations

import pytest

from dprobe.cli import main


@pytest.mark.parametrize(
    "argv",
    [["--config", "", "config", "show", "kafka"], ["config", "show", "kafka", "--config", ""]],
)
def test_an_empty_config_path_exits_2_naming_the_flag(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DPROBE_CONFIG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "--config" in err and "an empty path" in err
