"""benchmarks/profiler_lofo.py (docs/profiler.md): a table with fewer than two model
families leaves nothing to fit on when its one family is held out, so it exits 2 with one
line instead of printing an accuracy of 0.000."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.scripts import BENCHMARKS, refused_with, run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each

HEADER = "family,batch_size,amp,gpu_util_pct,gpu_mem_mb\n"


def test_a_table_of_one_family_is_one_line_and_exit_2(tmp_path: Path) -> None:
    table = tmp_path / "one.csv"
    table.write_text(HEADER + "resnet,32,1,90,8000\nresnet,64,0,95,12000\n")
    done = run_benchmark("profiler_lofo.py", "--table", str(table))
    assert refused_with(done) == (
        f"profiler_lofo.py: {table}: 1 model family (resnet); holding one out needs at least 2"
    )
    assert done.stdout == ""  # refused before any table is scored


def test_a_table_that_cannot_be_read_is_refused_before_any_table_is_scored(
    tmp_path: Path,
) -> None:
    gone = tmp_path / "nope.csv"
    done = run_benchmark("profiler_lofo.py", "--table", str(gone))
    assert refused_with(done).startswith(f"profiler_lofo.py: {gone}: ")
    assert done.stdout == ""  # no report of the shipped table before the refusal


def test_a_table_of_two_families_is_scored(tmp_path: Path) -> None:
    table = tmp_path / "two.csv"
    table.write_text(HEADER + "resnet,32,1,90,8000\nresnet,64,0,95,12000\nbert,16,1,40,6000\n")
    done = run_benchmark("profiler_lofo.py", "--table", str(table))
    assert done.returncode == 0, done.stderr
    assert f"== {table}: 3 profiles, 2 families" in done.stdout


def test_a_trace_folder_without_the_lucid_table_says_so(tmp_path: Path) -> None:
    """DPROBE_TRACE_DIR is set but holds no Lucid table: the shipped table is scored and the
    closing note names the file it looked for (it said to set DPROBE_TRACE_DIR)."""
    env = {**os.environ, "DPROBE_TRACE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "profiler_lofo.py")],
        capture_output=True, text=True, check=False, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "== shipped table" in done.stdout
    wanted = tmp_path / "lucid-profiles" / "single_data.csv"
    assert done.stdout.splitlines()[-1] == (
        f"(no {wanted}: pass --table to also score the Lucid profiles)"
    )
