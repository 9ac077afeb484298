"""demand-csv and helios-vc readers, and windowing of demand points."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dprobe.errors import UsageError
from dprobe.traces.demand_series import (
    DemandPoint,
    TraceFormatError,
    read_demand_csv,
    read_helios_vc,
    read_trace,
    tenant_of,
    trace_files,
)
from dprobe.traces.demand_windows import to_windows

HELIOS_HEADER = (
    "Time,total_job_num,running_job_num,pending_job_num,total_gpu_num,running_gpu_num,"
    "pending_gpu_num,idle_gpu_num\n"
)


def _helios_row(minute: int, running: int, pending: int, total: int = 64) -> str:
    return f"2020-05-01 00:{minute:02d}:00,3,2,1,{total},{running},{pending},{total - running}\n"


def test_demand_csv_reads_epoch_and_iso_times_and_optional_quota(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text(
        "ts,tenant,demand_gpus,quota_gpus\n1590000000,vc-a,8,16\n2020-05-20T18:41:00Z,vc-b,4.5,\n"
    )
    pts = list(read_demand_csv(f))
    assert [(p.ts, p.tenant, p.demand_gpus, p.quota_gpus, p.line) for p in pts] == [
        (1590000000.0, "vc-a", 8.0, 16.0, 2),
        (1590000060.0, "vc-b", 4.5, None, 3),
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("60,vc-a,eight", "d.csv:3: demand_gpus: not a number"),
        ("60,vc-a,-1", "d.csv:3: demand_gpus: must be a number within [0, 1000000]"),
        ("60,vc-a,nan", "d.csv:3: demand_gpus: must be a number within [0, 1000000]"),
        ("60,vc-a,1e12", "d.csv:3: demand_gpus: must be a number within [0, 1000000]"),
        ("1e300,vc-a,1", "d.csv:3: ts: not epoch seconds or ISO-8601"),
        ("yesterday,vc-a,1", "d.csv:3: ts: not epoch seconds or ISO-8601"),
        ("60,,1", "d.csv:3: tenant: empty"),
        ("60,vc-a", "d.csv:3: expected 3 fields, found 2"),
    ],
)
def test_demand_csv_errors_name_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    f = tmp_path / "d.csv"
    f.write_text(f"ts,tenant,demand_gpus\n0,vc-a,1\n{row}\n")
    with pytest.raises(TraceFormatError) as exc:
        list(read_demand_csv(f))
    assert message in str(exc.value)
    assert isinstance(exc.value, UsageError) and exc.value.line == 3


@pytest.mark.parametrize(
    ("row", "message"),
    [
        # times outside the schema's [0, 1e11] s: the worker would dead-letter them, and
        # calendar maths on the year 9999 overflows
        ("9999-12-30T00:00:00,vc-a,1", "d.csv:3: ts: not epoch seconds or ISO-8601 within"),
        ("-90000000000,vc-a,1", "d.csv:3: ts: not epoch seconds or ISO-8601 within"),
        ("0001-01-01T00:00:00+14:00,vc-a,1", "d.csv:3: ts: not epoch seconds or ISO-8601 within"),
        ("100000000001,vc-a,1", "d.csv:3: ts: not epoch seconds or ISO-8601 within"),
        ("60,vc-a,1" + "9" * (200 << 10), "d.csv:3: not valid CSV (field larger than field"),
        ("60,vc-\udcff,1", "d.csv:3: not UTF-8 text (byte 0xff)"),
        ("60," + "t" * 234 + ",1", "d.csv:3: tenant is 234 characters, more than 233"),
        ("60,vc\ta,1", "d.csv:3: tenant 'vc\\ta' holds a control character"),
    ],
)
def test_rows_the_worker_would_refuse_name_file_and_line(
    tmp_path: Path, row: str, message: str
) -> None:
    f = tmp_path / "d.csv"
    f.write_bytes(f"ts,tenant,demand_gpus\n0,vc-a,1\n{row}\n".encode("utf-8", "surrogateescape"))
    with pytest.raises(TraceFormatError) as exc:
        list(read_demand_csv(f))
    assert message in str(exc.value)
    assert exc.value.line == 3


def test_a_helios_time_out_of_range_or_a_long_file_name(tmp_path: Path) -> None:
    f = tmp_path / "vcX.csv"
    f.write_text(HELIOS_HEADER + _helios_row(0, 1, 0).replace("2020", "9999"))
    with pytest.raises(TraceFormatError, match=r"vcX.csv:2: time: not epoch seconds"):
        list(read_helios_vc(f))
    f = tmp_path / ("vc" + "x" * 232 + ".csv")
    f.write_text(HELIOS_HEADER + _helios_row(0, 1, 0))
    with pytest.raises(TraceFormatError, match=r"tenant .*234 characters, more than 233"):
        list(read_helios_vc(f))


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_bytes(b"\xef\xbb\xbfts,tenant,demand_gpus\r\n0,a,1\r\n")
    assert [(p.ts, p.tenant) for p in read_demand_csv(f)] == [(0.0, "a")]
    g = tmp_path / "vcB.csv.gz"
    g.write_bytes(gzip.compress(b"\xef\xbb\xbf" + (HELIOS_HEADER + _helios_row(0, 1, 0)).encode()))
    assert [p.running_gpus for p in read_helios_vc(g)] == [1.0]


def test_missing_column_and_empty_file(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("ts,tenant\n0,a\n")
    with pytest.raises(TraceFormatError, match=r"d.csv:1: header lacks column\(s\) demand_gpus"):
        list(read_demand_csv(f))
    f.write_text("")
    with pytest.raises(TraceFormatError, match="empty file"):
        list(read_demand_csv(f))


def test_a_missing_helios_column_names_the_header_as_the_file_spells_it(
    tmp_path: Path,
) -> None:
    """Helios headers are read in any case; the error quotes the file's own header (a
    file with a column vcVP5 is not said to have vcvp5)."""
    f = tmp_path / "quotas.csv"
    header = "date,vcVP5,vc6YE,total"
    f.write_text(f"{header}\n2020-04-01,0,128,784\n")
    with pytest.raises(TraceFormatError) as caught:
        list(read_helios_vc(f))
    assert str(caught.value).endswith(f"(found: {header.replace(',', ', ')})")


def test_helios_vc_reads_gzip_and_any_case_of_time(tmp_path: Path) -> None:
    f = tmp_path / "vcAbc.csv.gz"
    body = HELIOS_HEADER.replace("Time", "time") + _helios_row(0, 40, 8) + _helios_row(1, 48, 0)
    f.write_bytes(gzip.compress(body.encode()))
    pts = list(read_helios_vc(f))
    assert [
        (p.tenant, p.running_gpus, p.pending_gpus, p.demand_gpus, p.quota_gpus) for p in pts
    ] == [
        ("vcAbc", 40.0, 8.0, 48.0, 64.0),
        ("vcAbc", 48.0, 0.0, 48.0, 64.0),
    ]
    assert pts[1].ts - pts[0].ts == 60.0


def test_helios_bad_value_names_the_line(tmp_path: Path) -> None:
    f = tmp_path / "vcX.csv"
    f.write_text(
        HELIOS_HEADER + _helios_row(0, 40, 8) + _helios_row(1, 40, 8).replace(",8,", ",x,")
    )
    with pytest.raises(TraceFormatError, match=r"vcX.csv:3: pending_gpu_num: not a number"):
        list(read_helios_vc(f))


def test_folder_is_merged_in_time_order_and_skips_non_vc_files(tmp_path: Path) -> None:
    (tmp_path / "vcA.csv").write_text(HELIOS_HEADER + _helios_row(0, 1, 0) + _helios_row(2, 2, 0))
    (tmp_path / "vcB.csv").write_text(HELIOS_HEADER + _helios_row(1, 5, 0))
    (tmp_path / "earth_gpu_number.csv").write_text("date,vcA\n2020-04-01,8\n")
    assert [f.name for f in trace_files(tmp_path, "helios-vc")] == ["vcA.csv", "vcB.csv"]
    order = [(p.tenant, p.running_gpus) for p in read_trace(tmp_path, "helios-vc")]
    assert order == [("vcA", 1.0), ("vcB", 5.0), ("vcA", 2.0)]


def test_time_going_backwards_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("ts,tenant,demand_gpus\n120,a,1\n60,a,1\n")
    with pytest.raises(TraceFormatError, match=r"d.csv:3: time goes backwards") as e:
        list(read_trace(f, "demand-csv"))
    # the times read, in UTC and as the epoch seconds the file gave
    assert "(1970-01-01T00:01:00Z (60 s) after 1970-01-01T00:02:00Z (120 s))" in str(e.value)


@pytest.mark.parametrize("fmt", ["demand-csv", "helios-vc"])
def test_a_second_row_of_a_tenant_at_the_same_time_is_an_error_or_skipped(
    tmp_path: Path, fmt: str
) -> None:
    # which of the two demands holds at that minute? (evaluate averaged them, replay sent
    # both to the same hosts)
    if fmt == "demand-csv":
        f = tmp_path / "d.csv"
        f.write_text("ts,tenant,demand_gpus\n60,a,4\n60,b,8\n60,a,40\n120,a,5\n")
        expected = [(60.0, "a", 4.0), (60.0, "b", 8.0), (120.0, "a", 5.0)]
    else:
        f = tmp_path / "vcA.csv"
        f.write_text(HELIOS_HEADER + _helios_row(1, 4, 0) + "\n" + _helios_row(1, 40, 0)
                     + _helios_row(2, 5, 0))  # fmt: skip
        expected = [(60.0, "vcA", 4.0), (120.0, "vcA", 5.0)]
        expected = [(1588291200.0 + t, a, d) for t, a, d in expected]
    line = 4
    where = rf"{f.name}:{line}: tenant \w+ has a row at this time on line 2"
    with pytest.raises(TraceFormatError, match=where):
        list(read_trace(f, fmt))
    bad: list[str] = []
    got = [(p.ts, p.tenant, p.demand_gpus) for p in read_trace(f, fmt, on_bad=bad.append)]
    assert got == expected
    assert len(bad) == 1 and bad[0].startswith(f"{f}:{line}: ")


def test_a_row_over_a_year_after_the_one_before_is_an_error_or_skipped(tmp_path: Path) -> None:
    # a digit too many in a time: a replay would send every tenant's snapshots every tick
    # across the 4,000 years up to it
    f = tmp_path / "d.csv"
    f.write_text("ts,tenant,demand_gpus\n1590000000,a,4\n15900000000,a,5\n1590000060,a,6\n")
    with pytest.raises(TraceFormatError, match=r"d\.csv:3: time jumps 165,625 days after line 2's"):
        list(read_trace(f, "demand-csv"))
    bad: list[str] = []
    got = [(p.ts, p.demand_gpus) for p in read_trace(f, "demand-csv", on_bad=bad.append)]
    assert got == [(1590000000.0, 4.0), (1590000060.0, 6.0)]
    assert [b.split(": ")[0] for b in bad] == [f"{f}:3"]
    f.write_text("ts,tenant,demand_gpus\n0,a,4\n31622400,a,5\n")  # 366 days: taken
    assert len(list(read_trace(f, "demand-csv"))) == 2


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file or folder"):
        trace_files(tmp_path / "nope", "demand-csv")
    with pytest.raises(TraceFormatError, match="holds no demand-csv files"):
        trace_files(tmp_path, "demand-csv")


def test_tenant_of_strips_suffixes() -> None:
    assert tenant_of("x/vc6YE.csv.gz") == "vc6YE"
    assert tenant_of("vcA.csv") == "vcA"


def test_windows_average_points_and_skip_missing_ones() -> None:
    pts = [
        DemandPoint(ts=0.0, tenant="a", running_gpus=2.0, pending_gpus=2.0, quota_gpus=8.0),
        DemandPoint(ts=300.0, tenant="a", running_gpus=4.0, pending_gpus=0.0, quota_gpus=8.0),
        DemandPoint(ts=310.0, tenant="b", running_gpus=1.0, pending_gpus=0.0),
        DemandPoint(ts=1900.0, tenant="a", running_gpus=6.0, pending_gpus=0.0),
    ]
    ws = list(to_windows(pts, 600.0))
    assert [(w.tenant, w.window_start, w.window_end) for w in ws] == [
        ("a", 0.0, 600.0),
        ("b", 0.0, 600.0),
        ("a", 1800.0, 2400.0),
    ]
    a0 = ws[0]
    assert (a0.running_gpus, a0.pending_gpus, a0.quota_gpus, a0.samples) == (3.0, 1.0, 8.0, 2)
    assert a0.effective_demand_gpus == 4.0
    assert ws[2].quota_gpus is None


def test_real_helios_file(trace_dir: Path) -> None:
    f = trace_dir / "helios-earth-vcs" / "vc6YE.csv.gz"
    pts = list(read_helios_vc(f))
    assert len(pts) == 44_640
    assert pts[1].ts - pts[0].ts == 60.0
    assert all(p.demand_gpus == p.running_gpus + p.pending_gpus for p in pts[:100])


def test_a_helios_folder_without_per_vc_series_names_the_files_it_looks_for(
    tmp_path: Path,
) -> None:
    """A folder of other CSVs (a jobs trace, the quota table) is refused naming vc*.csv,
    not as if it held no CSV at all."""
    (tmp_path / "jobs.csv").write_text("job_id,user,num_gpu,submit_time,duration\n")
    with pytest.raises(
        TraceFormatError, match=r"no helios-vc files \(vc\*\.csv or vc\*\.csv\.gz\)"
    ):
        trace_files(tmp_path, "helios-vc")


@pytest.mark.parametrize("fmt", ["demand-csv", "helios-vc"])
def test_a_stray_quote_costs_its_own_row_and_is_named_by_its_line(tmp_path: Path, fmt: str) -> None:
    """A quote left open on one row must not swallow the rows after it (the csv module
    reads everything up to the next quote, or 128 KiB, as one field): a lenient read
    skips that row alone, a strict one names the line the quote is on."""
    # demand-csv: rows past the csv module's 128 KiB field limit; helios-vc: within a day
    values = [(minute, minute % 7) for minute in range(20_000 if fmt == "demand-csv" else 1400)]
    quote = '"'
    stray = 3  # the data row with the stray quote: line stray + 2
    if fmt == "demand-csv":
        f = tmp_path / "d.csv"
        lines = [f"{m * 60},vcA,{quote if m == stray else ''}{v}" for m, v in values]
        f.write_text("ts,tenant,demand_gpus\n" + "\n".join(lines) + "\n")
    else:
        f = tmp_path / "vcA.csv"
        rows = [
            f"2020-05-01 {m // 60:02d}:{m % 60:02d}:00,3,2,1,64,"
            f"{quote if m == stray else ''}{v},0,{64 - v}"
            for m, v in values
        ]
        f.write_text(HELIOS_HEADER + "\n".join(rows) + "\n")
    bad: list[str] = []
    got = [p.running_gpus for p in read_trace(f, fmt, on_bad=bad.append)]
    assert got == [float(v) for m, v in values if m != stray]
    assert bad == [f"{f}:{stray + 2}: a quote opened on this line is not closed"]
    with pytest.raises(TraceFormatError) as exc:
        list(read_trace(f, fmt))
    assert exc.value.line == stray + 2


def test_a_helios_vc_in_two_files_is_an_error_naming_both(tmp_path: Path) -> None:
    # vcA.csv decompressed beside vcA.csv.gz: every minute would be read (and replayed) twice
    (tmp_path / "vcA.csv").write_text(HELIOS_HEADER + _helios_row(0, 1, 0))
    with gzip.open(tmp_path / "vcA.csv.gz", "wt") as fh:
        fh.write(HELIOS_HEADER + _helios_row(0, 1, 0))
    (tmp_path / "vcB.csv").write_text(HELIOS_HEADER + _helios_row(0, 1, 0))
    with pytest.raises(
        TraceFormatError, match=r"VC vcA is in two files: vcA\.csv and vcA\.csv\.gz"
    ):
        read_trace(tmp_path, "helios-vc")
