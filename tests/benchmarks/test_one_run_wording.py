"""A benchmark asked for one run says so in the singular ("median of 1 run"), as the
rest of dprobe counts ("stopped after 1 snapshot")."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each


@pytest.mark.parametrize(
    ("script", "args", "said"),
    [
        (
            "planner_time.py",
            ["--tenants", "3", "--plans", "2", "--repeats", "1"],
            "2 plans x 1 run:",
        ),
        ("job_book.py", ["--jobs", "10", "--events", "20", "--runs", "1"], "(median of 1 run)"),
    ],
)
def test_one_run_is_counted_in_the_singular(script: str, args: list[str], said: str) -> None:
    done = run_benchmark(script, *args)
    assert done.returncode == 0, done.stderr
    assert said in done.stdout
    assert "1 runs" not in done.stdout
