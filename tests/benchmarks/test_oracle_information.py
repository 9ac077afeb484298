"""benchmarks/oracle_information.py (docs/simulation.md): a bad flag exits 2 with one line
before any run starts, not with a traceback from a run process."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dprobe.errors import UsageError
from dprobe.sim.synthetic import SyntheticSettings, generate
from tests.benchmarks.scripts import refused_with, run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each


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
        (["--days", "0.01"], "--days must be > 0 (at least one hour, 1/24), got 0.01"),
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


def _two_days_of_one_vc(folder: Path) -> None:
    head = "time,running_gpu_num,pending_gpu_num,total_gpu_num,running_gpu_num_noless_8,"
    rows = "".join(
        f"2020-05-{1 + h // 24:02d} {h % 24:02d}:{m:02d}:00,8,0,16,0,0\n"
        for h in range(48)
        for m in range(60)
    )
    with gzip.open(folder / "vcA.csv.gz", "wt") as fh:
        fh.write(head + "pending_gpu_num_noless_8\n" + rows)


@pytest.mark.parametrize("series", [False, True], ids=["no series", "too few days"])
def test_what_the_series_cannot_give_is_one_line_before_any_run(
    tmp_path: Path, series: bool
) -> None:
    """A folder without Helios VC series, or more --days than its series cover: the
    stream's own message, not a traceback from a run process."""
    if series:
        _two_days_of_one_vc(tmp_path)
    with pytest.raises(UsageError) as err:  # the reference: what the stream says itself
        generate(tmp_path, SyntheticSettings(days=3, seed=1))
    done = run_benchmark("oracle_information.py", "--helios", str(tmp_path), "--days", "3")
    assert refused_with(done) == f"oracle_information.py: {err.value}"
    assert done.stdout == ""


def test_the_summary_table_keeps_its_columns_for_every_rule_name() -> None:
    """``predictive-latency-lead`` is longer than the rule column was wide: its row pushed
    the figures right of their headings."""
    from benchmarks.oracle_information import RULES, summary_lines

    figures = {"runs": 18, "mean_share": 0.5, "geo_share": 0.25, "below_reactive": 9}
    lost = {"lost_gpu_h": 1234.0, "reactive_lost_gpu_h": 4875.0}
    cell = {"latency_s": 900.0, "reclaim": "preempt"}
    summary = [{**cell, "rule": rule, **figures, **lost} for rule in RULES]
    header, *rows = summary_lines(summary)
    for heading in ("rule", "mean", "geo"):  # right-aligned: values end where it ends
        end = header.index(heading) + len(heading)
        assert all(row[end - 1] != " " and row[end] == " " for row in rows), (heading, rows)
    assert [row.split()[2] for row in rows] == list(RULES)
