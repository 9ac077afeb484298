"""benchmarks/worker_throughput.py and tenants_at_scale.py (docs/worker.md) take worker
settings from the environment; a worker that exits on a bad one stops the benchmark with
a last line giving the worker's own error and its exit code 2, instead of a traceback that
names a log already deleted, or figures of a worker that is not running (0 GB, no
windows)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.benchmarks.scripts import BENCHMARKS

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # starts dprobe worker processes

WORKER_SAYS = "dprobe worker: environment DPROBE_WORKER_BATCH_MAX: expected an integer, got 'abc'"
SMALL = {
    "worker_throughput.py": ["--snapshots", "200", "--runs", "1", "--latency-s", "0"],
    "tenants_at_scale.py": ["--tenants", "4", "--hosts", "2", "--procs", "2", "--seconds", "30"],
}


@pytest.mark.parametrize("script", sorted(SMALL))
def test_a_worker_that_exits_on_a_bad_setting_stops_the_run_with_its_error(
    kafka_bootstrap: str, script: str
) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *SMALL[script]],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "DPROBE_WORKER_BATCH_MAX": "abc"},
    )
    assert done.returncode == 2, done.stderr
    # its last line; aiokafka may warn before it about the topics it just created
    assert done.stderr.splitlines()[-1] == f"{script}: a worker exited with code 2: {WORKER_SAYS}"
    assert "Traceback" not in done.stderr
