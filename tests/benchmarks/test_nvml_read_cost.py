"""benchmarks/nvml_read_cost.py (docs/collector.md) on a machine without a usable NVML
exits 2 with one line that names the script as the other benchmarks do (``NAME.py:``)."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import refused_with, run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each


def test_no_usable_nvml_is_one_line_naming_the_script() -> None:
    done = run_benchmark("nvml_read_cost.py", "--runs", "1", "--reads", "1")
    if done.returncode == 0:
        pytest.skip("this machine has a usable NVML: the benchmark ran")
    assert refused_with(done).startswith("nvml_read_cost.py: no usable NVML here: ")
    assert done.stdout == ""
