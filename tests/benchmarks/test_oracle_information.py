"""benchmarks/oracle_information.py (docs/simulation.md): a bad flag exits 2 with one line
before any run starts, not with a traceback from a run process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.scripts import refused_with, run_benchmark


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--cells", "900:waitt"], "--cells: '900:waitt' is not LATENCY:RECLAIM"),
        (["--cells", "abc"], "--cells: 'abc' is not LATENCY:RECLAIM"),
        (["--cells=-300:wait"], "--cells: '-300:wait' is not LATENCY:RECLAIM"),
        (["--seeds", "1,x"], "--seeds '1,x': not a list of whole numbers"),
        (["--policies", "fifo,lsa"], "unknown policies ['lsa']"),
        (["--forecaster", "recent_peak"], "unknown forecaster 'recent_peak'"),
        (["--rules", "oracle"], "unknown rules ['oracle']"),
        (["--days", "0"], "--days must be > 0"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2(tmp_path: Path, extra: list[str], says: str) -> None:
    done = run_benchmark("oracle_information.py", "--helios", str(tmp_path), *extra)
    assert refused_with(done).startswith(f"oracle_information.py: {says}")


def test_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    gone = tmp_path / "nope"
    done = run_benchmark("oracle_information.py", "--helios", str(gone))
    assert refused_with(done) == (
        f"oracle_information.py: {gone}: no such folder (set DPROBE_TRACE_DIR or pass --helios)"
    )
