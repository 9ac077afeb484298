"""Run a script of ``benchmarks/`` as a user does, for the tests of its command line.

>>> run_benchmark("forecast_throughput.py", "--tenants=0").returncode  # doctest: +SKIP
2
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_benchmark(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/SCRIPT ARGS...``: exit code, stdout and stderr as text."""
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def refused_with(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a script that refused its input (exit 2) wrote on stderr; fails the
    test when it exited otherwise or wrote more or less than one line."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]
