"""The benchmarks that need Kafka (docs/collector.md, replay.md, worker.md), pointed at an
address where no broker listens, exit 2 with a line naming that address, not with an
aiokafka traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.benchmarks.scripts import BENCHMARKS
from tests.conftest import _free_port

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each

RUNS = {
    "collector_overhead.py": ["--runs", "1", "--ticks", "1"],
    "replay_throughput.py": ["--hosts", "1", "--ticks", "1", "--runs", "1"],
    "worker_throughput.py": ["--snapshots", "10", "--runs", "1", "--latency-s", "0"],
    "tenants_at_scale.py": ["--tenants", "1", "--hosts", "1", "--procs", "1", "--seconds", "5"],
}


@pytest.mark.parametrize("script", sorted(RUNS))
def test_no_broker_at_the_address_is_one_line_and_exit_2(script: str) -> None:
    nobody = f"127.0.0.1:{_free_port()}"  # bound once and closed: nothing listens there
    how = ["--bootstrap", nobody] if script == "collector_overhead.py" else []
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *RUNS[script], *how],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "KAFKA_BOOTSTRAP": nobody},
    )
    assert done.returncode == 2, done.stderr
    # its last line (replay_throughput.py says first what archive it built)
    assert done.stderr.splitlines()[-1].startswith(f"{script}: cannot reach Kafka at {nobody}: ")
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
