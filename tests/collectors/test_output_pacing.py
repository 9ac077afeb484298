"""``dprobe collect --output``: snapshots one interval apart on average, whatever a tick
costs, so N ticks span N - 1 intervals of event time (a day of minutes is a day)."""

from __future__ import annotations

import json
from pathlib import Path

from dprobe.cli import main


def test_output_snapshots_keep_to_the_interval_on_an_accelerated_clock(
    capsys, tmp_path: Path
) -> None:
    out = tmp_path / "snaps.jsonl"
    ticks, interval = 200, 10.0
    args = ["collect", "--backend", "synthetic", "--clock-speed", "1000"]
    args += ["--interval", str(interval), "--output", str(out), "--max-ticks", str(ticks)]
    assert main(args) == 0
    assert capsys.readouterr().err.strip().startswith(f"dprobe collect: wrote {ticks} ")
    stamps = [json.loads(line)["ts"] for line in out.read_text().splitlines()]
    assert len(stamps) == ticks
    span = stamps[-1] - stamps[0]
    # one late wake-up (a few ms of wall time, seconds of event time) shifts the last
    # stamp only; time lost at every tick would add up over the 199 intervals
    assert abs(span / (ticks - 1) - interval) < 0.01 * interval, span


def test_the_summary_counts_one_snapshot_in_the_singular(capsys, tmp_path: Path) -> None:
    out = tmp_path / "one.jsonl"
    args = ["collect", "--backend", "synthetic", "--output", str(out), "--max-ticks", "1"]
    assert main(args) == 0
    assert capsys.readouterr().err.strip().startswith("dprobe collect: wrote 1 snapshot of host ")
