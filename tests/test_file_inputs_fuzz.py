"""Every file a command reads gives one line and exit 2 on bad input, never a traceback:
binary, gzip, a directory, empty, truncated Parquet, and values that would exhaust memory
or time (huge GPU counts, durations, timestamps)."""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path

import pytest

from dprobe.cli import main
from dprobe.config import WorkerSettings, load
from dprobe.errors import UsageError

JOBS_HEADER = "job_id,user,num_gpu,submit_time,duration\n"


def _cases(tmp_path: Path) -> dict[str, Path]:
    rng = random.Random(5)
    out = {}

    def put(name: str, data: bytes) -> None:
        p = tmp_path / name
        p.write_bytes(data)
        out[name] = p

    put("binary", rng.randbytes(3000))
    put("gzip", gzip.compress(b"[worker]\nwindow_s = 60\n" * 50))
    put("empty", b"")
    put("nul", b"\0" * 4096)
    put("huge-gpus", (JOBS_HEADER + "1,a,5000000,0,5\n").encode())
    put("huge-duration", (JOBS_HEADER + "1,a,2,0,1e308\n").encode())
    put("huge-time", (JOBS_HEADER + "1,a,2,1e300,5\n").encode())
    # one endless line, compressed (a decompression bomb is the same at any length)
    put("endless-line.csv.gz", gzip.compress(b"ts,tenant,demand_gpus\n" + b"9" * (3 << 20)))
    # a compressed trace cut short (a copy that did not finish)
    rows = "".join(f"{i},u{i % 7},{1 + i % 4},{i},{5 + i % 9}\n" for i in range(20_000))
    put("truncated.csv.gz", gzip.compress((JOBS_HEADER + rows).encode(), mtime=0)[:20_000])
    d = tmp_path / "a-directory"
    d.mkdir()
    out["directory"] = d
    return out


def _commands(path: Path, tmp_path: Path) -> list[list[str]]:
    vcs = tmp_path / "vcs.csv"
    vcs.write_text("vc,node num\na,2\n")
    jobs = tmp_path / "ok.csv"
    jobs.write_text(JOBS_HEADER + "1,a,2,0,5\n")
    sim = ["simulate", "--chart", "", "--policies", "fifo", "--modes", "static"]
    return [
        [*sim, "--jobs", str(path), "--nodes", "2"],
        [*sim, "--jobs", str(jobs), "--vcs", str(path)],
        [*sim, "--jobs", str(jobs), "--vcs", str(vcs), "--colocate", str(path)],
        ["evaluate", "--format", "demand-csv", "--trace", str(path)],
        ["evaluate", "--format", "jobs-csv", "--trace", str(path)],
        ["collect", "--backend", "synthetic", "--once", "--tenant-map", str(path)],
    ]


CASES = [
    "binary", "gzip", "empty", "nul", "directory", "huge-gpus", "huge-duration", "huge-time",
    "endless-line.csv.gz", "truncated.csv.gz",
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_each_reader_answers_bad_files_in_one_line_with_exit_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _cases(tmp_path)[case]
    for argv in _commands(path, tmp_path):
        code = main(argv)
        err = capsys.readouterr().err
        if code == 0:  # a value that is fine for this reader (e.g. an empty config file)
            continue
        assert code == 2, (argv, err)
        lines = [line for line in err.strip().splitlines() if line.strip()]
        assert len(lines) == 1, (argv, err)
        assert "Traceback" not in err
    try:  # the settings file of every command (a worker would go on to connect)
        load(WorkerSettings, file=path, env={})
    except UsageError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("fmt", ["jobs-csv", "demand-csv", "helios-vc", "dprobe-parquet"])
def test_replay_names_a_bad_file_before_it_connects_to_kafka(
    case: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _cases(tmp_path)[case]
    # nothing listens on port 1: a file error must come first, and alone
    code = main(["--bootstrap", "127.0.0.1:1", "replay", str(path), "--format", fmt])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert str(path) in last and "Kafka" not in last, err


def test_a_truncated_or_empty_archive_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dprobe.errors import UsageError
    from dprobe.traces.archive_reader import archive_files, count_records, read_archive

    for name, data in (("junk", b"PAR1junkjunkPAR1"), ("empty", b"")):
        d = tmp_path / name / "samples" / "date=2023-11-14" / "hour=00"
        d.mkdir(parents=True)
        (d / "samples-p0-o0-o9.parquet").write_bytes(data)
        files = archive_files(tmp_path / name)
        with pytest.raises(UsageError, match="unreadable Parquet file"):
            count_records(files)
        with pytest.raises(UsageError, match="unreadable Parquet file"):
            list(read_archive(tmp_path / name))


def test_settings_that_would_exhaust_the_broker_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "p.toml"
    cfg.write_text("[worker]\npartitions = 100000000000000000\n")
    with pytest.raises(UsageError, match=r"worker.partitions must be within \[1, 10000\]"):
        load(WorkerSettings, file=cfg, env={})


def test_a_settings_file_of_gigabytes_is_refused_without_reading_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "sparse.toml"
    with big.open("wb") as f:
        f.truncate(2 << 30)  # 2 GiB of holes: reading it whole would need 2 GiB of memory
    with pytest.raises(UsageError) as info:
        load(WorkerSettings, file=big, env={})
    assert str(big) in str(info.value) and "\n" not in str(info.value)
    code = main(["--config", str(big), "collect", "--backend", "synthetic", "--once"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_archive_row_without_an_event_time_is_one_line(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dprobe.sinks.archive_schema import SCHEMAS
    from dprobe.traces.archive_reader import read_archive

    d = tmp_path / "jobs" / "date=2023-11-14" / "hour=00"
    d.mkdir(parents=True)
    rows = [
        {"partition": 0, "offset": i, "timestamp_ms": None, "key": b"k", "value": b"{}", "ts": ts}
        for i, ts in enumerate([1_700_000_000.0, None])
    ]
    # written by another tool: dprobe's own schema declares ts non-nullable
    schema = SCHEMAS["jobs"]
    at = schema.get_field_index("ts")
    schema = schema.set(at, schema.field(at).with_nullable(True))
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), d / "jobs-p0-o0-o1.parquet")
    with pytest.raises(UsageError, match=r"row 2: ts must be a finite number"):
        list(read_archive(tmp_path))


@pytest.mark.parametrize(
    ("column", "values", "expected"),
    [
        ("partition", [None, 0], r"row 1: partition is null"),
        ("value", [b"{}", None], r"row 2: value is null"),
        ("value", [[1], [2]], r"column value holds list<\w+: int64>, expected bytes"),
        ("key", ["a", "b"], r"column key holds string, expected bytes"),
        ("ts", ["1", "2"], r"column ts holds string, expected a number"),
        ("offset", None, r"not a dprobe archive file: no column offset"),
    ],
)
def test_an_archive_file_of_another_layout_is_one_line_with_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    column: str,
    values: list[object] | None,
    expected: str,
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dprobe.traces.archive_reader import read_archive

    d = tmp_path / "jobs" / "date=2023-11-14" / "hour=00"
    d.mkdir(parents=True)
    cols: dict[str, list[object]] = {
        "ts": [1_700_000_000.0, 1_700_000_000.0],
        "partition": [0, 0],
        "offset": [0, 1],
        "key": [b"k", b"k"],
        "value": [b"{}", b"{}"],
    }
    if values is None:
        del cols[column]
    else:
        cols[column] = values
    path = d / "jobs-p0-o0-o1.parquet"
    pq.write_table(pa.table(cols), path)  # written by another tool, not dprobe's schema
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}: {expected}$"):
        list(read_archive(tmp_path))
    code = main(
        ["--bootstrap", "127.0.0.1:1", "replay", str(tmp_path), "--format", "dprobe-parquet"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert str(path) in err.strip().splitlines()[-1]


@pytest.mark.parametrize(("written", "named"), [("jobs", "samples"), ("samples", "cluster")])
def test_an_archive_file_of_one_kind_named_as_another_is_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], written: str, named: str
) -> None:
    from dprobe.schema import HostSnapshot, JobEvent, encode
    from dprobe.sinks.archive_schema import row_of
    from dprobe.sinks.parquet_archive import ArchiveWriter
    from dprobe.traces.archive_reader import read_archive

    built = tmp_path / "built"
    w = ArchiveWriter(built, fsync=False)
    msg = (
        JobEvent(ts=1_700_000_000.0, event="submit", job="j1", tenant="a", gpus=1)
        if written == "jobs"
        else HostSnapshot(ts=1_700_000_000.0, host="h", seq=0, interval_s=10.0, gpus=[], procs=[])
    )
    w.add(
        written,
        row_of(written, msg, key=b"k", value=encode(msg), partition=0, offset=0, timestamp_ms=None),
    )
    w.flush()
    (made,) = built.rglob("*.parquet")
    assert list(read_archive(built))  # as written, it reads
    wrong = tmp_path / "copy" / named / made.parent.parent.name / made.parent.name
    wrong.mkdir(parents=True)
    path = wrong / made.name.replace(written, named, 1)
    path.write_bytes(made.read_bytes())
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}: holds {written} records"):
        list(read_archive(tmp_path / "copy"))
    code = main(
        [
            "--bootstrap",
            "127.0.0.1:1",
            "replay",
            str(tmp_path / "copy"),
            "--format",
            "dprobe-parquet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"not {named}" in err.strip().splitlines()[-1]
