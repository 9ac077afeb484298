"""``dprobe collect --once`` and ``--output`` send nothing, keep no spool and serve no
/metrics: a flag for those, or ``--max-ticks`` with ``--once``, is refused (exit 2,
naming it) instead of being silently ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.cli import main

SERVICE_FLAGS = [
    ["--topic", "mine.samples"],
    ["--no-send"],
    ["--metrics-port", "9999"],
    ["--metrics-addr", "0.0.0.0"],
    ["--spool-dir", "SPOOL"],
    ["--spool-max-bytes", "2000000"],
    ["--state-dir", "STATE"],
    ["--shutdown-timeout", "3"],
    ["--metrics-port", "0"],  # a zero is a value given too (any free port)
    ["--shutdown-timeout", "0"],
]


@pytest.mark.parametrize("flag", SERVICE_FLAGS, ids=" ".join)
@pytest.mark.parametrize("mode", ["--once", "--output"])
def test_a_service_flag_with_once_or_output_exits_2_naming_it(
    flag: list[str], mode: str, capsys, tmp_path: Path
) -> None:
    out = tmp_path / "snaps.jsonl"
    run = ["--once"] if mode == "--once" else ["--output", str(out), "--max-ticks", "1"]
    given = [str(tmp_path / a) if a in ("SPOOL", "STATE") else a for a in flag]
    code = main(["collect", "--backend", "synthetic", *run, *given])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"dprobe collect: {flag[0]} does not apply with {mode} ")
    assert not out.exists()
    assert not (tmp_path / "SPOOL").exists() and not (tmp_path / "STATE").exists()


def test_max_ticks_with_once_exits_2(capsys) -> None:
    code = main(["collect", "--backend", "synthetic", "--once", "--max-ticks", "5"])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert captured.err.startswith("dprobe collect: --max-ticks does not apply with --once ")


def test_several_are_named_together(capsys, tmp_path: Path) -> None:
    argv = ["collect", "--backend", "synthetic", "--output", str(tmp_path / "o.jsonl")]
    assert main([*argv, "--max-ticks", "1", "--topic", "t.samples", "--no-send"]) == 2
    assert capsys.readouterr().err.startswith(
        "dprobe collect: --topic and --no-send do not apply with --output "
    )
