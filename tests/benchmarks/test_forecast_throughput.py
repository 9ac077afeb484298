"""benchmarks/forecast_throughput.py (docs/forecasting.md): a count that would leave
nothing to time exits 2 with one line, not a table of zeros or a traceback."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import refused_with, run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each


@pytest.mark.parametrize(
    ("flag", "value", "least"),
    [("--tenants", "0", 1), ("--windows", "0", 1), ("--repeats", "0", 1), ("--warm", "-1", 0)],
)
def test_a_count_with_nothing_to_time_is_one_line_and_exit_2(
    flag: str, value: str, least: int
) -> None:
    done = run_benchmark("forecast_throughput.py", f"{flag}={value}")
    assert refused_with(done) == f"forecast_throughput.py: {flag} must be >= {least}, got {value}"
    assert done.stdout == ""
