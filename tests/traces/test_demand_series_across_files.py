"""A folder of demand-csv files is one trace: the checks a file's rows pass (no jump of
over a year, one row per tenant and time) hold across its files too, so splitting a
trace into files (one per month, one per tenant) lets no typo through."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from dprobe.cli import main
from dprobe.traces.demand_series import TraceFormatError, read_trace

HEAD = "ts,tenant,demand_gpus\n"


def _folder(tmp_path: Path, files: dict[str, str]) -> Path:
    d = tmp_path / "trace"
    d.mkdir()
    for name, rows in files.items():
        (d / name).write_text(HEAD + rows)
    return d


def test_a_row_over_a_year_after_the_other_files_rows_is_an_error_or_skipped(
    tmp_path: Path,
) -> None:
    # May 2020 in one file; the next month's file has a digit too many in its first time
    d = _folder(
        tmp_path,
        {"a-05.csv": "1590000000,a,4\n1590000060,a,5\n", "a-06.csv": "15900000000,a,6\n"},
    )
    later = d / "a-06.csv"
    with pytest.raises(TraceFormatError, match=rf"^{later}:2: time jumps 165,625 days after "):
        list(read_trace(d, "demand-csv"))
    bad: list[str] = []
    got = [(p.ts, p.demand_gpus) for p in read_trace(d, "demand-csv", on_bad=bad.append)]
    assert got == [(1590000000.0, 4.0), (1590000060.0, 5.0)]
    assert [b.split(": ")[0] for b in bad] == [f"{later}:2"]


def test_a_tenant_at_the_same_time_in_two_files_is_an_error_or_skipped(tmp_path: Path) -> None:
    d = _folder(tmp_path, {"a1.csv": "60,a,4\n120,a,5\n", "a2.csv": "60,a,40\n60,b,8\n"})
    with pytest.raises(
        TraceFormatError, match=rf"^{d / 'a2.csv'}:2: tenant a has a row at this time on "
    ):
        list(read_trace(d, "demand-csv"))
    bad: list[str] = []
    got = [(p.ts, p.tenant, p.demand_gpus) for p in read_trace(d, "demand-csv", on_bad=bad.append)]
    assert got == [(60.0, "a", 4.0), (60.0, "b", 8.0), (120.0, "a", 5.0)]
    assert [b.split(": ")[0] for b in bad] == [f"{d / 'a2.csv'}:2"]


def test_files_of_other_tenants_at_the_same_times_are_read(tmp_path: Path) -> None:
    d = _folder(tmp_path, {"a.csv": "0,a,1\n60,a,2\n", "b.csv": "0,b,3\n60,b,4\n"})
    got = [(p.ts, p.tenant) for p in read_trace(d, "demand-csv")]
    assert got == [(0.0, "a"), (0.0, "b"), (60.0, "a"), (60.0, "b")]


def test_evaluate_names_the_far_row_of_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = "".join(f"{1590000000 + 600 * i},a,{i % 7}\n" for i in range(200))
    d = _folder(tmp_path, {"a-05.csv": rows, "a-06.csv": "15900000000,a,6\n"})
    code = main(["evaluate", "--trace", str(d), "--format", "demand-csv", "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2, err
    last, far = 1590000000 + 600 * 199, 15_900_000_000

    def utc(ts: int) -> str:
        return f"{datetime.fromtimestamp(ts, UTC):%Y-%m-%dT%H:%M:%SZ} ({ts} s)"

    assert err.splitlines() == [
        f"dprobe evaluate: {d / 'a-06.csv'}:2: time jumps {(far - last) / 86_400:,.0f} days "
        f"after {d / 'a-05.csv'}:201's ({utc(far)} after {utc(last)}); a digit too many?"
    ]
