"""``--tick`` (``[replay] tick_s``) below a collector's shortest interval exits 2 naming
the bound: a tick too short to move an event time on sent snapshots for ever."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dprobe.config import MIN_COLLECT_INTERVAL_S, ConfigError, ReplaySettings


@pytest.mark.parametrize("tick", ["1e-300", str(MIN_COLLECT_INTERVAL_S / 2)])
def test_a_tick_shorter_than_a_collectors_exits_2(tmp_path: Path, tick: str) -> None:
    trace = tmp_path / "d.csv"
    trace.write_text("ts,tenant,demand_gpus\n1700000000,a,1\n1700000060,a,1\n")
    done = subprocess.run(
        [sys.executable, "-m", "dprobe.cli", "--bootstrap", "127.0.0.1:1", "replay", str(trace),
         "--format", "demand-csv", "--speed", "max", "--no-progress", "--tick", tick],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"replay.tick_s must be at least {MIN_COLLECT_INTERVAL_S:g} s" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_shortest_tick_is_taken() -> None:
    assert ReplaySettings(tick_s=MIN_COLLECT_INTERVAL_S).tick_s == MIN_COLLECT_INTERVAL_S
    with pytest.raises(ConfigError, match=r"replay\.tick_s must be at least"):
        ReplaySettings(tick_s=0.0)
