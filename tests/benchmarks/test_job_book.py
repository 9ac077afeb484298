"""benchmarks/job_book.py (docs/worker.md): ``--before DIR`` measures the code of the
checkout at DIR, so a DIR that holds no checkout exits 2 with one line instead of
measuring this checkout twice and printing a ratio of 1.0x."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.benchmarks.scripts import refused_with, run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each

SMALL = ("--jobs", "10", "--events", "10", "--runs", "1")
IGNORED = shutil.ignore_patterns("__pycache__")


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_before_a_folder_without_a_checkout_is_one_line_and_exit_2(
    tmp_path: Path, where: str
) -> None:
    folder = tmp_path / where
    if where == "empty":
        folder.mkdir()
    done = run_benchmark("job_book.py", "--before", str(folder), *SMALL)
    assert refused_with(done) == (
        f"job_book.py: --before {folder}: not a checkout of dprobe (no dprobe/__init__.py there)"
    )
    assert done.stdout == ""


def test_before_a_checkout_prints_both_and_their_ratio(tmp_path: Path) -> None:
    # a copy of this checkout's packages elsewhere: nothing the script imports from its
    # own checkout before it switches may count as that checkout lacking it
    root = Path(__file__).resolve().parents[2]
    for package in ("dprobe", "collectors", "streams", "models", "sinks", "traces", "sim"):
        shutil.copytree(root / package, tmp_path / package, ignore=IGNORED)
    done = run_benchmark("job_book.py", "--before", str(tmp_path), *SMALL)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines[2:4]] == ["before", "after"]
    assert lines[4].startswith("after/before: ")


def test_before_a_checkout_without_the_modules_measured_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    """Modules DIR lacks would be imported from this checkout instead: the figures would
    mix the two versions' code."""
    (tmp_path / "dprobe").mkdir()
    (tmp_path / "dprobe" / "__init__.py").write_text("")
    (tmp_path / "dprobe" / "schema.py").write_text("raise ImportError('not this one')\n")
    done = run_benchmark("job_book.py", "--before", str(tmp_path), *SMALL)
    line = refused_with(done)
    assert line.startswith(f"job_book.py: --before {tmp_path}: ")
    assert "dprobe.schema" in line or "not this one" in line
    assert done.stdout == ""


def test_before_a_checkout_lacking_a_module_is_not_measured_with_this_one(tmp_path: Path) -> None:
    (tmp_path / "dprobe").mkdir()
    (tmp_path / "dprobe" / "__init__.py").write_text("")
    done = run_benchmark("job_book.py", "--before", str(tmp_path), *SMALL)
    line = refused_with(done)
    assert line.startswith(f"job_book.py: --before {tmp_path}: ")
    assert "dprobe.schema" in line
    assert done.stdout == ""
