"""``dprobe collect --once --output FILE``: refused, as --once prints on stdout and the
FILE the user asked for would silently not be written."""

from __future__ import annotations

from pathlib import Path

from dprobe.cli import main


def test_once_with_output_exits_2_naming_both_and_writes_nothing(capsys, tmp_path: Path) -> None:
    out = tmp_path / "snap.json"
    code = main(["collect", "--backend", "synthetic", "--once", "--output", str(out)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.strip() == (
        "dprobe collect: --output does not apply with --once (it prints one snapshot on "
        "stdout; for a file: --output FILE --max-ticks 1)"
    )
    assert not out.exists()
