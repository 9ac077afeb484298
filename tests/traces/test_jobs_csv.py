"""jobs-csv reader: units, errors naming file and line, and the Philly/Chronus reading."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from dprobe.errors import UsageError
from dprobe.traces.jobs_csv import iter_jobs, read_jobs, read_vc_nodes, vc_key

HEADER = "job_id,user,num_gpu,submit_time,duration,model_name,extra\n"


def _write(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    p = tmp_path / "jobs.csv"
    p.write_text(header + body)
    return p


def test_minutes_by_default_seconds_on_request_and_by_header(tmp_path: Path) -> None:
    p = _write(tmp_path, "a,vc_x,4,3,10,vgg16,z\nb,vc_y,1,1,2,,z\n")
    jobs = read_jobs(p)
    assert [(j.job_id, j.submit_s, j.duration_s, j.line) for j in jobs] == [
        ("b", 60.0, 120.0, 3),
        ("a", 180.0, 600.0, 2),
    ]
    assert [j.submit_s for j in read_jobs(p, time_unit_s=1.0)] == [1.0, 3.0]
    s = _write(tmp_path, "a,u,2,5,7\n", header="job_id,user,num_gpu,submit_time_s,duration_s\n")
    (job,) = read_jobs(s, time_unit_s=60.0)
    assert (job.submit_s, job.duration_s, job.model_name) == (5.0, 7.0, "")


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ("a,u,1,0,5,m,z\nb,u,x,0,5,m,z\n", 3, "num_gpu 'x' is not a number"),
        ("a,u,1.5,0,5,m,z\n", 2, "whole number"),
        ("a,u,1,0,0,m,z\n", 2, "duration > 0"),
        ("a,u,1,-1,5,m,z\n", 2, "submit_time >= 0"),
        ("a,u,1,0,nan,m,z\n", 2, "finite"),
        ("a,u,1,0,5,m,z\na,u,1,0,5,m,z\n", 3, "duplicate job_id"),
        ("a,u,1\n", 2, "3 fields"),
        ("a,,1,0,5,m,z\n", 2, "empty job_id or user"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, body: str, line: int, words: str) -> None:
    p = _write(tmp_path, body)
    with pytest.raises(UsageError, match=f"jobs.csv:{line}: .*{words}"):
        read_jobs(p)


def test_bad_header_missing_file_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"jobs.csv:1: missing column\(s\) duration"):
        read_jobs(_write(tmp_path, "", header="job_id,user,num_gpu,submit_time\n"))
    with pytest.raises(UsageError, match=r"jobs\.csv:1: empty file"):
        read_jobs(_write(tmp_path, "", header=""))
    with pytest.raises(UsageError, match=r"nope\.csv: no such file$"):
        read_jobs(tmp_path / "nope.csv")


def test_a_folder_is_refused_with_the_jobs_files_it_holds_named(tmp_path: Path) -> None:
    """A folder given where one jobs file is meant (a trace's own folder, as shipped) says
    which files it could have meant, rather than the bare 'Is a directory'."""
    (tmp_path / "trace_job_a.csv").write_text(HEADER)
    (tmp_path / "vc.csv.gz").write_bytes(b"")
    (tmp_path / "LICENSE").write_text("")
    with pytest.raises(
        UsageError,
        match=r"is a folder, not a jobs CSV file: did you mean one of trace_job_a\.csv, "
        r"vc\.csv\.gz in it\?",
    ):
        read_jobs(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match=r"empty: is a folder, not a jobs CSV file \(it holds no"):
        read_jobs(empty)


@pytest.mark.parametrize("fmt", ["jobs-csv", "demand-csv"])
def test_a_compressed_file_cut_short_names_the_line_it_ends_in(tmp_path: Path, fmt: str) -> None:
    from dprobe.traces.demand_series import read_demand_csv

    if fmt == "jobs-csv":
        head, row = HEADER, "{i},a,1,{i},5,m,x\n"
    else:
        head, row = "ts,tenant,demand_gpus\n", "{i},a,1\n"
    text = head + "".join(row.format(i=i) for i in range(20_000))
    f = tmp_path / "cut.csv.gz"
    f.write_bytes(gzip.compress(text.encode(), mtime=0)[:20_000])
    read = iter_jobs if fmt == "jobs-csv" else read_demand_csv
    with pytest.raises(UsageError, match=r"cut\.csv\.gz:(\d+): unreadable: .*ended") as got:
        list(read(f))
    line = int(str(got.value).split(":")[1])
    assert 2 < line < 20_002  # the line that was being read, as far as the data went
    assert "\n" not in str(got.value)


def test_open_file_and_vc_sizes(tmp_path: Path) -> None:
    jobs = list(iter_jobs(io.StringIO(HEADER + "a,vc_q,8,0,1,m,z\n"), time_unit_s=1.0))
    assert jobs[0].tenant == "vc_q"
    vc = tmp_path / "vc.csv"
    vc.write_text("vc,node num\nq,3\nr,0\n")
    assert read_vc_nodes(vc) == {"q": 3, "r": 0}
    assert vc_key("vc_q") == "q"
    vc.write_text("vc,node num\nq,three\n")
    with pytest.raises(UsageError, match=r"vc\.csv:2: node num"):
        read_vc_nodes(vc)


def test_philly_chronus_reading_in_minutes_is_plausible(trace_dir: Path) -> None:
    # The unit is undocumented. Both columns must share a unit: with both in minutes the
    # mean job runs ~4.3 h, close to the 5.0 h (18,006 s) Helios reports for the real
    # Philly GPU jobs; read as seconds it would be ~4 minutes. Offered load is the same
    # either way (< 1 of the 352 x 8 GPUs).
    d = trace_dir / "philly-chronus"
    jobs = read_jobs(d / "trace_job_Philly_MIX1.csv")
    assert len(jobs) == 30_940
    mean_h = sum(j.duration_s for j in jobs) / len(jobs) / 3600
    assert 18_006 / 3600 / 2 < mean_h < 18_006 / 3600 * 2
    span = max(j.submit_s for j in jobs) - min(j.submit_s for j in jobs)
    assert 13 * 86400 < span < 15 * 86400  # two weeks
    gpus = 8 * sum(read_vc_nodes(d / "philly_vc.csv").values())
    assert gpus == 2816
    load = sum(j.num_gpu * j.duration_s for j in jobs) / (span * gpus)
    assert 0.2 < load < 0.6
    assert {vc_key(j.tenant) for j in jobs} == set(read_vc_nodes(d / "philly_vc.csv"))


BIG_FIELD = "x" * (200 << 10)  # over the csv module's 128 KiB field limit


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        (f"a,u,1,0,5,m,z\nb,{BIG_FIELD},1,0,5,m,z\n", 3, r"not valid CSV \(field larger"),
        ("a,u,1,0,5,m,z\nb,u,1,0,5,m\udcff,z\n", 3, r"not UTF-8 text \(byte 0xff\)"),
        ("j" * 257 + ",u,1,0,5,m,z\n", 2, "job_id is 257 characters, more than 256"),
        ("a," + "u" * 234 + ",1,0,5,m,z\n", 2, "user is 234 characters, more than 233"),
        ("a,u,1,0,5," + "m" * 257 + ",z\n", 2, "model_name is 257 characters, more than 256"),
        # a quoted line break (named by the line the row ends on) or an escape sequence
        # would split log lines and colour terminals
        ('a,"u\nv",1,0,5,m,z\n', 3, r"user 'u\\nv' holds a control character"),
        ("a\x1b[2J,u,1,0,5,m,z\n", 2, r"job_id 'a\\x1b\[2J' holds a control character"),
        # ends after the schema's last time (1e11 s), though it starts before it
        ("a,u,1,1666666666,60,m,z\n", 2, "after the last time the schema allows"),
    ],
)
def test_rows_the_worker_would_refuse_name_file_and_line(
    tmp_path: Path, body: str, line: int, words: str
) -> None:
    p = tmp_path / "jobs.csv"
    p.write_bytes((HEADER + body).encode("utf-8", "surrogateescape"))
    with pytest.raises(UsageError, match=f"jobs.csv:{line}: .*({words})"):
        read_jobs(p)


def test_names_as_long_as_the_schema_allows_are_read(tmp_path: Path) -> None:
    p = _write(tmp_path, "j" * 256 + "," + "u" * 233 + ",1,0,5," + "m" * 256 + ",z\n")
    (job,) = read_jobs(p)
    assert (len(job.job_id), len(job.tenant), len(job.model_name)) == (256, 233, 256)


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    p = tmp_path / "jobs.csv"
    p.write_bytes(b"\xef\xbb\xbf" + (HEADER + "a,u,1,0,5,m,z\r\n").encode())
    assert [j.job_id for j in read_jobs(p)] == ["a"]
    vc = tmp_path / "vc.csv"
    vc.write_bytes(b"\xef\xbb\xbfvc,node num\r\nq,3\r\n")
    assert read_vc_nodes(vc) == {"q": 3}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("q,3\nr,1\nq,5\n", "vc.csv:4: vc 'q' is listed twice"),
        ("q,3\n,4\n", "vc.csv:3: empty vc name"),
        ("q,3,7\n", "vc.csv:2: 3 fields, the header has 2"),
        (f"q,3\n{BIG_FIELD},1\n", "vc.csv:3: not valid CSV (field larger than field limit"),
    ],
)
def test_a_vc_file_never_overwrites_or_drops_silently(
    tmp_path: Path, body: str, message: str
) -> None:
    vc = tmp_path / "vc.csv"
    vc.write_text("vc,node num\n" + body)
    with pytest.raises(UsageError) as info:
        read_vc_nodes(vc)
    assert message in str(info.value)


def test_a_quote_never_closed_costs_one_row(tmp_path: Path) -> None:
    """A quote opened and never closed would make the csv module read every later line as
    one field: the jobs after it are read, the row with the quote is named by its line."""
    quote = '"'
    rows = [f"j{i},u,1,{i},5,m,{quote if i == 2 else ''}z" for i in range(500)]
    p = _write(tmp_path, "\n".join(rows) + "\n")
    bad: list[str] = []
    jobs = list(iter_jobs(p, on_bad=bad.append))
    assert [j.job_id for j in jobs] == [f"j{i}" for i in range(500) if i != 2]
    assert bad == [f"{p}:4: a quote opened on this line is not closed"]
    with pytest.raises(UsageError, match=r"jobs\.csv:4: a quote opened on this line is not closed"):
        read_jobs(p)


def test_a_row_with_a_field_more_than_the_header_is_refused(tmp_path: Path) -> None:
    """An unquoted comma in a field before the times (Philly puts model_name before
    duration) shifts them: the model's second half would be read as the duration."""
    p = tmp_path / "jobs.csv"
    p.write_text(
        "job_id,user,num_gpu,submit_time,model_name,duration\n"
        "1,vc_a,1,0,vgg16,30\n"
        "2,vc_a,1,0,resnet,50,30\n"
        "3,vc_a,1,0,bert,40\n"
    )
    bad: list[str] = []
    assert [(j.job_id, j.duration_s) for j in iter_jobs(p, on_bad=bad.append)] == [
        ("1", 1800.0),
        ("3", 2400.0),
    ]
    assert bad == [f"{p}:3: 7 fields, the header has 6"]
    with pytest.raises(UsageError, match=r"jobs\.csv:3: 7 fields, the header has 6"):
        read_jobs(p)


def test_a_job_submitted_over_a_year_after_the_others_ended_is_refused(tmp_path: Path) -> None:
    # a submit_time with a digit too many: a simulation's span (and so its allocation
    # ratio) and an evaluation's windows would stretch over 162 years
    f = tmp_path / "jobs.csv"
    f.write_text(
        "job_id,user,num_gpu,submit_time,duration\n"
        "1,a,2,0,60\n"
        "2,a,2,85550000,60\n"
        "3,b,2,10,500000\n"  # runs 347 days; job 4 comes 62 days after it ends
        "4,b,2,590000,5\n"
    )
    with pytest.raises(UsageError, match=rf"{f.name}:3: submitted 59,000 days after every job"):
        read_jobs(f)
    f.write_text("job_id,user,num_gpu,submit_time,duration\n1,a,2,0,60\n3,b,2,10,500000\n"
                 "4,b,2,590000,5\n")  # fmt: skip
    assert [j.job_id for j in read_jobs(f)] == ["1", "3", "4"]
