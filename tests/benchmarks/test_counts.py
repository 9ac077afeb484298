"""The scripts of ``benchmarks/`` given a count or a duration that leaves nothing to
measure (``--runs 0``, ``--interval 0``, ...) exit 2 with one line naming the flag, before
any work or broker starts; they ended in a traceback (an empty median, a division by
zero) or printed a table of zeros."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import refused_with, run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each

REFUSED = [
    ("planner_time.py", "--tenants", "0", ">= 1"),
    ("planner_time.py", "--plans", "0", ">= 1"),
    ("planner_time.py", "--repeats", "0", ">= 1"),
    ("worker_floor.py", "--snapshots", "0", ">= 1"),
    ("worker_floor.py", "--runs", "0", ">= 1"),
    ("worker_floor.py", "--procs-per-gpu", "0", ">= 1"),
    ("job_book.py", "--jobs", "-1", ">= 0"),
    ("job_book.py", "--events", "0", ">= 1"),
    ("job_book.py", "--runs", "0", ">= 1"),
    ("tenant_churn.py", "--generations", "0", ">= 1"),
    ("tenant_churn.py", "--tenants", "0", ">= 1"),
    ("tenant_churn.py", "--life-h", "0", "> 0 hours (at least one 60-s window)"),
    ("tenant_churn.py", "--life-h", "nan", "> 0 hours (at least one 60-s window)"),
    ("tenant_churn.py", "--forget-h", "-1", ">= 0 hours (0: never)"),
    ("collector_overhead.py", "--runs", "0", ">= 1"),
    ("collector_overhead.py", "--ticks", "0", ">= 1"),
    ("collector_overhead.py", "--gpus", "0", ">= 1"),
    ("collector_overhead.py", "--procs", "0", ">= 1"),
    ("collector_overhead.py", "--interval", "0", "> 0 seconds"),
    ("replay_throughput.py", "--hosts", "0", ">= 1"),
    ("replay_throughput.py", "--ticks", "0", ">= 1"),
    ("replay_throughput.py", "--runs", "0", ">= 1"),
    ("tenants_at_scale.py", "--tenants", "0", ">= 1"),
    ("tenants_at_scale.py", "--hosts", "0", ">= 1"),
    ("tenants_at_scale.py", "--procs", "0", ">= 1"),
    ("tenants_at_scale.py", "--seconds", "0", "> 0 seconds"),
    ("tenants_at_scale.py", "--every", "0", "> 0 seconds"),
    ("worker_throughput.py", "--snapshots", "0", ">= 1"),
    ("worker_throughput.py", "--hosts", "0", ">= 1"),
    ("worker_throughput.py", "--runs", "0", ">= 1"),
    ("worker_throughput.py", "--workers", "0", ">= 1"),
    ("worker_throughput.py", "--partitions", "0", ">= 1"),
    ("worker_throughput.py", "--procs-per-gpu", "0", ">= 1"),
    ("worker_throughput.py", "--latency-s", "-1", ">= 0 seconds (0: no latency run)"),
    ("oracle_information.py", "--workers", "0", ">= 1"),
    ("nvml_read_cost.py", "--runs", "0", ">= 1"),
    ("nvml_read_cost.py", "--reads", "-5", ">= 1"),
]


@pytest.mark.parametrize(("script", "flag", "value", "bound"), REFUSED)
def test_a_count_that_leaves_nothing_to_measure_is_one_line_and_exit_2(
    script: str, flag: str, value: str, bound: str
) -> None:
    done = run_benchmark(script, f"{flag}={value}")
    assert refused_with(done) == f"{script}: {flag} must be {bound}, got {value}"
    assert done.stdout == ""


@pytest.mark.parametrize("script", ["tenant_churn.py", "tenants_at_scale.py"])
def test_an_unknown_model_is_one_line_and_exit_2(script: str) -> None:
    done = run_benchmark(script, "--model", "dprobe-mmoee")
    assert refused_with(done).startswith(f"{script}: --model 'dprobe-mmoee': choose from ")
    assert "dprobe-mmoe," in done.stderr
