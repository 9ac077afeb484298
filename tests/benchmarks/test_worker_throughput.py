"""benchmarks/worker_throughput.py (docs/worker.md): each figure of its summary line says
its unit; the bare consumer's ceiling, a rate like the worker's, read as a bare number."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.benchmarks.scripts import BENCHMARKS

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # starts a dprobe worker process


def test_the_summary_gives_the_ceiling_in_samples_per_second(kafka_bootstrap: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "worker_throughput.py"), "--snapshots", "3000",
         "--hosts", "2", "--runs", "1", "--latency-s", "0", "--json"],
        capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    *lines, last = done.stdout.splitlines()
    figures = json.loads(last)  # the reference: the same run's figures as JSON
    [summary] = [line for line in lines if line.startswith("throughput (")]
    rate, ceiling = figures["samples_per_s"], figures["bare_samples_per_s"]
    assert f": {rate:,.0f} process samples/s (range " in summary
    assert f"; ceiling {ceiling:,.0f} process samples/s; " in summary


def test_a_backlog_read_before_timing_could_start_is_one_line_and_exit_2(
    kafka_bootstrap: str,
) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "worker_throughput.py"), "--snapshots", "20",
         "--hosts", "2", "--runs", "1", "--latency-s", "0"],
        capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "worker_throughput.py: the worker read all 20 snapshots before the timing could "
        "start: pass a larger --snapshots"
    )
    assert "Traceback" not in done.stderr
