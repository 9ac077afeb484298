"""benchmarks/job_inputs.py (docs/forecasting.md): a bad flag, a missing trace or a bad
trace row exits 2 with one line before any model runs, not with a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.benchmarks.scripts import refused_with, run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each

HEADER = "job_id,user,num_gpu,submit_time,duration"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_benchmark("job_inputs.py", *args)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "\n" + "".join(f"{i},vc_a,1,{i * 10},30\n" for i in range(20)))
    return path


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--test-start", "May 8"], "--test-start: not an ISO date: 'May 8'"),
        (["--test-start", "1970-01-02", "--test-end", "1970-13-01"], "--test-end: not an ISO"),
        (["--test-start", "1970-01-03", "--test-end", "1970-01-02"], "--test-start must be before"),
        (["--test-start", "1970-01-02", "--seeds", "0,one"], "--seeds '0,one': not a list"),
        (["--test-start", "1970-01-02", "--time-unit", "0"], "--time-unit must be > 0"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2(trace: Path, extra: list[str], says: str) -> None:
    done = _run("--trace", str(trace), *extra)
    assert refused_with(done).startswith(f"job_inputs.py: {says}")
    assert done.stdout == ""  # nothing ran


def test_a_bad_row_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "jobs.csv"
    bad.write_text(HEADER + "\n0,vc_a,1,0,30\n1,vc_a,two,5,30\n")
    done = _run("--trace", str(bad), "--test-start", "1970-01-02")
    assert refused_with(done) == f"job_inputs.py: {bad}:3: num_gpu 'two' is not a number"


def test_a_missing_trace_says_how_to_point_at_one(tmp_path: Path) -> None:
    gone = tmp_path / "nope.csv"
    done = _run("--trace", str(gone), "--test-start", "1970-01-02")
    assert refused_with(done) == (
        f"job_inputs.py: --trace {gone}: not found (set DPROBE_TRACE_DIR or pass --trace)"
    )


@pytest.mark.parametrize(
    ("start", "end", "says"),
    [  # windows end 00:10 .. 03:50: 20 jobs of 30 min, one every 10 min, the last ending
        # at 03:40 (its end is an event of the window 03:40 .. 03:50)
        ("1970-01-01T01:00", None, "the test span 1970-01-01T01:00Z .. 1970-01-01T03:50Z (2.83 h)"),
        (
            "1970-01-01T00:30",
            "1970-01-01T03:00",
            "the test span 1970-01-01T00:30Z .. 1970-01-01T03:00Z",
        ),
        ("1970-01-02", None, "--test-start 1970-01-02T00:00Z is after the trace's last window"),
        ("1970-01-01", None, "--test-start 1970-01-01T00:00Z leaves no window to fit on"),
    ],
)
def test_a_test_span_that_cannot_score_6_h_is_one_line_and_exit_2(
    trace: Path, start: str, end: str | None, says: str
) -> None:
    """The script compares the models at 1 h and 6 h: a span that cannot score a 6-h
    forecast is refused before any model runs (it ended in a KeyError traceback)."""
    done = _run("--trace", str(trace), "--test-start", start, *(["--test-end", end] if end else []))
    assert refused_with(done).startswith(f"job_inputs.py: {says}")
    assert done.stdout == ""
