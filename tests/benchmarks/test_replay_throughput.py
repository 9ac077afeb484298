"""benchmarks/replay_throughput.py (docs/replay.md): it replays its archive into a real
broker and prints records per second."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.benchmarks.scripts import BENCHMARKS

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each


@pytest.mark.integration
def test_it_replays_the_archive_and_prints_the_rate(kafka_bootstrap: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "replay_throughput.py"),
         "--hosts", "2", "--ticks", "3", "--runs", "1"],
        capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "archive: 6 snapshots" in done.stderr
    assert re.search(r"^run 1: 6 records in [\d.]+ s = [\d,]+ records/s$", done.stdout, re.M)
    assert "median" in done.stdout and "records/s over 1 run (" in done.stdout
