"""``make bench`` (scripts/run_benchmarks.py) runs every benchmark it can at its defaults
and skips, saying why, those that need what the machine lacks; it ran the scripts in
order and stopped at the first that needed the traces, so it never got past the first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.scripts import BENCHMARKS, refused_with, run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each

ROOT = BENCHMARKS.parent
RUNNER = ROOT / "scripts" / "run_benchmarks.py"


def _runner(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUNNER), *args], capture_output=True, text=True, env=env,
        timeout=120, check=False,
    )  # fmt: skip


def _without_traces() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DPROBE_TRACE_DIR"}
    env["PATH"] = "/usr/bin:/bin"  # no nvidia-smi on it
    return env


def test_without_traces_or_a_gpu_it_lists_what_it_skips_and_runs_the_rest() -> None:
    done = _runner("--list", env=_without_traces())
    assert done.returncode == 0, done.stderr
    listed = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    # every script, and not the modules they share (``_counts.py``), which print nothing
    assert set(listed) == {p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_")}
    skipped = {n for n, what in listed.items() if what.startswith("skipped")}
    assert skipped == {"calibration_folds", "job_inputs", "oracle_information", "nvml_read_cost"}
    assert listed["nvml_read_cost"] == "skipped, needs an NVIDIA GPU"


def test_with_the_traces_only_the_gpu_benchmark_is_skipped(tmp_path: Path) -> None:
    done = _runner("--list", env={**_without_traces(), "DPROBE_TRACE_DIR": str(tmp_path)})
    skipped = [ln for ln in done.stdout.splitlines() if "skipped" in ln]
    assert skipped == ["nvml_read_cost: skipped, needs an NVIDIA GPU"]


@pytest.mark.parametrize("script", ["calibration_folds", "job_inputs", "oracle_information"])
def test_each_script_skipped_for_the_traces_cannot_run_without_them(
    script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the reference: run at its defaults (job_inputs with the span the runner gives it),
    # without DPROBE_TRACE_DIR the script refuses in one line naming the setting
    args = ["--test-start", "1970-01-05", "--test-end", "1970-01-08"] * (script == "job_inputs")
    monkeypatch.delenv("DPROBE_TRACE_DIR", raising=False)
    assert "DPROBE_TRACE_DIR" in refused_with(run_benchmark(f"{script}.py", *args))


def test_every_script_that_reads_the_traces_is_skipped_without_them_or_runs_anyway() -> None:
    # a new benchmark that reads DPROBE_TRACE_DIR must be classified: skipped without the
    # traces, or (as profiler_lofo) run without them, saying what it leaves out
    reads = {p.stem for p in BENCHMARKS.glob("*.py") if "DPROBE_TRACE_DIR" in p.read_text()}
    listed = _runner("--list", env=_without_traces()).stdout
    runs_anyway = {n for n in reads if f"{n}: runs" in listed}
    assert runs_anyway == {"profiler_lofo"}
