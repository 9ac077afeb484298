"""The Parquet archive writer: names, hourly split, overwrite on restart, atomic files,
and a field-for-field round trip through the archive reader (cluster reports too, ahead of
the samples and jobs of their instant; archives without them still read)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pyarrow.parquet as pq
import pytest

from dprobe import folders, schema
from dprobe.sinks import parquet_archive
from dprobe.sinks.archive_schema import row_of
from dprobe.sinks.parquet_archive import ArchiveWriter, list_files
from dprobe.traces.archive_reader import archive_files, count_records, read_archive
from dprobe.traces.replay_record import ReplayRecord
from tests.streams.helpers import make_snapshots

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def _add_snapshots(
    w: ArchiveWriter, snaps: list[schema.HostSnapshot], partition: int, first: int
) -> None:
    for i, s in enumerate(snaps):
        w.add(
            "samples",
            row_of(
                "samples",
                s,
                key=s.host.encode(),
                value=schema.encode(s),
                partition=partition,
                offset=first + i,
                timestamp_ms=1000 + i,
            ),
        )


def _job(ts: float, job: str) -> schema.JobEvent:
    return schema.JobEvent(ts=ts, event="submit", job=job, tenant="vc-a", gpus=4, model="bert")


def _add_job(w: ArchiveWriter, ev: schema.JobEvent, partition: int, offset: int) -> None:
    w.add(
        "jobs",
        row_of(
            "jobs",
            ev,
            key=ev.job.encode(),
            value=schema.encode(ev),
            partition=partition,
            offset=offset,
            timestamp_ms=None,
        ),
    )


def _add_report(w: ArchiveWriter, value: bytes, partition: int, offset: int) -> None:
    """Archive the ``dprobe.cluster`` record ``value`` (keyed by its source, like the topic)."""
    report = schema.decode_cluster_report(value)
    w.add(
        "cluster",
        row_of(
            "cluster",
            report,
            key=report.source.encode(),
            value=value,
            partition=partition,
            offset=offset,
            timestamp_ms=2000 + offset,
        ),
    )


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_file_named_by_topic_partition_hour_and_offsets(tmp_path: Path) -> None:
    w = ArchiveWriter(tmp_path)
    _add_snapshots(w, make_snapshots(hosts=1, ticks=5, t0=T0), partition=3, first=1200)
    written = w.flush()
    assert [str(p.relative_to(tmp_path)) for p in written] == [
        "samples/date=2023-11-14/hour=22/samples-p3-o1200-o1204.parquet"
    ]
    assert w.buffered_records == 0 and w.buffered_bytes == 0


def test_records_split_by_event_time_hour_and_partition(tmp_path: Path) -> None:
    w = ArchiveWriter(tmp_path)
    # 22:59:59 and 23:00:00 UTC fall in two hours; offsets interleave across hours
    _add_job(w, _job(1_700_002_799.0, "a"), partition=0, offset=10)
    _add_job(w, _job(1_700_002_800.0, "b"), partition=0, offset=11)
    _add_job(w, _job(1_700_002_000.0, "c"), partition=0, offset=12)
    _add_job(w, _job(1_700_002_000.0, "d"), partition=1, offset=0)
    w.flush()
    assert _files(tmp_path) == [
        "jobs/date=2023-11-14/hour=22/jobs-p0-o10-o12.parquet",
        "jobs/date=2023-11-14/hour=22/jobs-p1-o0-o0.parquet",
        "jobs/date=2023-11-14/hour=23/jobs-p0-o11-o11.parquet",
    ]


def test_round_trip_reproduces_every_message_field_for_field(tmp_path: Path) -> None:
    snaps = make_snapshots(hosts=3, ticks=40, t0=T0 + 3600 - 20, seed=7)  # spans two hours
    jobs = [_job(T0 + 3600 - 30 + 7 * i, f"job-{i}") for i in range(10)]
    w = ArchiveWriter(tmp_path)
    _add_snapshots(w, snaps[: len(snaps) // 2], partition=0, first=0)
    _add_snapshots(w, snaps[len(snaps) // 2 :], partition=1, first=0)
    for i, ev in enumerate(jobs):
        _add_job(w, ev, partition=i % 2, offset=i // 2)
    w.flush()

    got = list(read_archive(tmp_path))
    assert len(got) == len(snaps) + len(jobs)
    assert [r.ts for r in got] == sorted(r.ts for r in got)
    samples = [schema.decode_snapshot(r.value) for r in got if r.kind == "samples"]
    events = [schema.decode_job_event(r.value) for r in got if r.kind == "jobs"]
    assert sorted(samples, key=lambda s: (s.ts, s.host)) == sorted(
        snaps, key=lambda s: (s.ts, s.host)
    )
    assert events == sorted(jobs, key=lambda e: e.ts)
    assert {r.key for r in got if r.kind == "samples"} == {b"host-0", b"host-1", b"host-2"}
    assert all(
        r.value == schema.encode(schema.decode_snapshot(r.value))
        for r in got
        if r.kind == "samples"
    )


def test_flattened_columns_zstd_and_dictionary_strings(tmp_path: Path) -> None:
    snaps = make_snapshots(hosts=2, ticks=3, t0=T0)
    w = ArchiveWriter(tmp_path)
    _add_snapshots(w, snaps, partition=0, first=0)
    (path,) = w.flush()
    table = pq.read_table(path)
    assert table.column("host").to_pylist() == [s.host for s in snaps]
    assert table.column("seq").to_pylist() == [s.seq for s in snaps]
    assert table.column("procs").to_pylist() == [len(s.procs) for s in snaps]
    assert table.column("tenants").to_pylist() == [
        sorted({p.tenant for p in s.procs}) for s in snaps
    ]
    meta = pq.ParquetFile(path).metadata.row_group(0)
    cols = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert all(c.compression == "ZSTD" for c in cols.values())
    assert cols["host"].has_dictionary_page
    assert cols["tenants.list.element"].has_dictionary_page


def test_restart_rereading_same_offsets_overwrites(tmp_path: Path) -> None:
    snaps = make_snapshots(hosts=1, ticks=10, t0=T0)
    first = ArchiveWriter(tmp_path)
    _add_snapshots(first, snaps, partition=0, first=100)
    first.flush()
    again = ArchiveWriter(tmp_path)  # a restart before the commit reads the same offsets
    _add_snapshots(again, snaps, partition=0, first=100)
    again.flush()
    assert _files(tmp_path) == ["samples/date=2023-11-14/hour=22/samples-p0-o100-o109.parquet"]
    assert len(list(read_archive(tmp_path))) == 10


def test_uncommitted_files_removed_so_new_cuts_do_not_duplicate(tmp_path: Path) -> None:
    snaps = make_snapshots(hosts=1, ticks=30, t0=T0)
    w = ArchiveWriter(tmp_path)
    _add_snapshots(w, snaps[:10], partition=0, first=0)
    w.flush()  # committed: next offset 10
    _add_snapshots(w, snaps[10:20], partition=0, first=10)
    w.flush()  # crash before the commit of offsets 10..19
    _add_job(w, _job(T0, "other-partition"), partition=1, offset=10)
    w.flush()

    restarted = ArchiveWriter(tmp_path)
    removed = restarted.remove_uncommitted("samples", 0, committed=10)
    assert [p.name for p in removed] == ["samples-p0-o10-o19.parquet"]
    _add_snapshots(restarted, snaps[10:], partition=0, first=10)  # cut differently this time
    restarted.flush()
    names = [f.path.name for f in list_files(tmp_path)]
    assert names == [
        "samples-p0-o0-o9.parquet",
        "samples-p0-o10-o29.parquet",
        "jobs-p1-o10-o10.parquet",
    ]
    got = [schema.decode_snapshot(r.value) for r in read_archive(tmp_path) if r.kind == "samples"]
    assert [s.seq for s in got] == list(range(30))


def _on_disk(root: Path) -> tuple[int, int]:
    """Records and files the archive folder holds, read from the Parquet footers."""
    files = list(list_files(root))
    return sum(pq.ParquetFile(f.path).metadata.num_rows for f in files), len(files)


def test_counts_are_what_the_folder_holds_after_files_are_written_again(
    tmp_path: Path,
) -> None:
    """The counts ``dprobe archive`` prints: a file removed as never committed (a
    rebalance while a commit was refused) and written again counts once, and so does a
    file written again under the same name."""
    snaps = make_snapshots(hosts=1, ticks=30, t0=T0)
    w = ArchiveWriter(tmp_path, fsync=False)
    _add_snapshots(w, snaps[:10], partition=0, first=0)
    w.flush()
    w.committed("samples", 0, 10)
    _add_snapshots(w, snaps[10:20], partition=0, first=10)
    w.flush()  # its commit is refused, then the partition is assigned again
    w.remove_uncommitted("samples", 0, committed=10)
    _add_snapshots(w, snaps[10:], partition=0, first=10)  # read again, cut differently
    w.flush()
    _add_snapshots(w, snaps[10:], partition=0, first=10)  # the same file written again
    w.flush()
    assert (w.records_written, w.files_written) == _on_disk(tmp_path) == (30, 2)


def test_a_committed_file_is_never_uncounted(tmp_path: Path) -> None:
    """Files at offsets already committed stay counted; only those removed go."""
    snaps = make_snapshots(hosts=1, ticks=20, t0=T0)
    w = ArchiveWriter(tmp_path, fsync=False)
    _add_snapshots(w, snaps[:10], partition=0, first=0)
    _add_snapshots(w, snaps[10:], partition=1, first=0)
    w.flush()
    w.committed("samples", 0, 10)
    w.remove_uncommitted("samples", 0, committed=10)
    w.remove_uncommitted("samples", 1, committed=0)
    assert (w.records_written, w.files_written) == _on_disk(tmp_path) == (10, 1)


def test_a_record_in_two_files_is_read_once(tmp_path: Path) -> None:
    """An archiver that lost partition 0 while stalled flushes offsets 0-14 after the new
    owner wrote 0-29 in other cuts (and a second archiver writes jobs into the same
    folder): each Kafka record is read once, in order, and the other records all stay."""
    snaps = make_snapshots(hosts=1, ticks=30, t0=T0)
    owner = ArchiveWriter(tmp_path)
    _add_snapshots(owner, snaps[:20], partition=0, first=0)
    owner.flush()
    _add_snapshots(owner, snaps[20:], partition=0, first=20)
    _add_job(owner, _job(T0 + 5, "j1"), partition=1, offset=7)
    owner.flush()
    stalled = ArchiveWriter(tmp_path)
    _add_snapshots(stalled, snaps[:15], partition=0, first=0)
    _add_snapshots(stalled, snaps[:3], partition=1, first=0)  # partition 1: other records
    _add_job(stalled, _job(T0 + 5, "j1"), partition=1, offset=7)
    stalled.flush()
    got = list(read_archive(tmp_path))
    samples = [schema.decode_snapshot(r.value) for r in got if r.kind == "samples"]
    assert len(samples) == 33
    assert sorted(s.seq for s in samples) == sorted([*range(30), 0, 1, 2])
    assert [r.key for r in got if r.kind == "jobs"] == [b"j1"]
    assert [r.ts for r in got] == sorted(r.ts for r in got)
    assert count_records(archive_files(tmp_path)) == len(got)  # replay's progress total


def test_the_same_offsets_in_another_hour_are_other_records(tmp_path: Path) -> None:
    """A topic made anew starts its offsets again: its records are read, and counted."""
    first = make_snapshots(hosts=1, ticks=3, t0=T0)
    again = make_snapshots(hosts=1, ticks=3, t0=T0 + 7200, seed=9)
    for snaps in (first, again):
        w = ArchiveWriter(tmp_path)
        _add_snapshots(w, snaps, partition=0, first=0)
        w.flush()
    read = list(read_archive(tmp_path))
    assert len(read) == 6
    assert count_records(archive_files(tmp_path)) == 6


def test_the_record_count_keeps_every_record_of_a_file_with_offset_gaps(
    tmp_path: Path,
) -> None:
    """A file whose offsets have gaps (a compacted or transactional topic) does not say
    which offsets it holds: its rows all count, so the total never falls below what is read."""
    snaps = make_snapshots(hosts=1, ticks=6, t0=T0)
    dense = ArchiveWriter(tmp_path)
    _add_snapshots(dense, snaps[:3], partition=0, first=0)  # offsets 0-2
    dense.flush()
    sparse = ArchiveWriter(tmp_path)
    for offset in (1, 3, 5):  # offset 1 again (a copy); 3 and 5 new
        _add_snapshots(sparse, [snaps[offset]], partition=0, first=offset)
    sparse.flush()
    read = [schema.decode_snapshot(r.value).seq for r in read_archive(tmp_path)]
    assert read == [0, 1, 2, 3, 5]
    assert count_records(archive_files(tmp_path)) == 3 + 3


def test_failed_write_leaves_old_file_and_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snaps = make_snapshots(hosts=1, ticks=5, t0=T0)
    w = ArchiveWriter(tmp_path)
    _add_snapshots(w, snaps, partition=0, first=0)
    (path,) = w.flush()
    before = path.read_bytes()

    real = parquet_archive.pq.write_table

    def torn(table, where, **kw):  # type: ignore[no-untyped-def]
        where.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(parquet_archive.pq, "write_table", torn)
    again = ArchiveWriter(tmp_path)
    _add_snapshots(again, snaps, partition=0, first=0)
    with pytest.raises(OSError, match="disk full"):
        again.flush()
    assert path.read_bytes() == before  # readers never see a torn file
    assert not list(tmp_path.rglob(".*.tmp"))  # nor its temp file
    assert again.buffered_records == 5  # kept: a retry rewrites them
    monkeypatch.setattr(parquet_archive.pq, "write_table", real)
    again.flush()
    assert [f.path.name for f in list_files(tmp_path)] == ["samples-p0-o0-o4.parquet"]


def test_row_of_rejects_message_of_the_other_topic() -> None:
    ev = _job(T0, "j")
    with pytest.raises(ValueError, match="does not belong"):
        row_of("samples", ev, key=None, value=b"{}", partition=0, offset=0, timestamp_ms=None)


# Two reports as a scheduler adapter might write them: JSON not in the encoder's own layout
# (spaces, field order), so only a byte-for-byte archive gives the same bytes back.
REPORT_FULL = (
    b'{"source": "kueue", "v": 1, "ts": 1700000000.5, "capacity_gpus": 64,'
    b' "quotas": {"vc-b": 24, "vc-a": 40}, "complete": true}'
)
REPORT_PARTIAL = b'{"v":1,"ts":1700000100.0,"source":"ops","quotas":{"vc-c":8.5}}'


def test_cluster_report_round_trips_byte_for_byte_as_kind_cluster(tmp_path: Path) -> None:
    w = ArchiveWriter(tmp_path, fsync=False)
    _add_report(w, REPORT_FULL, partition=0, offset=3)
    _add_report(w, REPORT_PARTIAL, partition=0, offset=4)
    (path,) = w.flush()
    assert str(path.relative_to(tmp_path)) == (
        "cluster/date=2023-11-14/hour=22/cluster-p0-o3-o4.parquet"
    )
    assert list(read_archive(tmp_path)) == [
        ReplayRecord(1_700_000_000.5, "cluster", b"kueue", REPORT_FULL),
        ReplayRecord(1_700_000_100.0, "cluster", b"ops", REPORT_PARTIAL),
    ]
    table = pq.read_table(path)
    assert table.column("source").to_pylist() == ["kueue", "ops"]
    assert table.column("capacity_gpus").to_pylist() == [64.0, None]  # None: not reported
    assert table.column("tenants").to_pylist() == [["vc-a", "vc-b"], ["vc-c"]]
    assert table.column("ts").to_pylist() == [1_700_000_000.5, 1_700_000_100.0]
    assert table.column("timestamp_ms").to_pylist() == [2003, 2004]
    meta = pq.ParquetFile(path).metadata.row_group(0)
    cols = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert cols["source"].has_dictionary_page
    assert cols["tenants.list.element"].has_dictionary_page
    # the cluster folder alone is an archive PATH too, and so is one of its files
    assert [f.kind for f in archive_files(tmp_path / "cluster")] == ["cluster"]
    assert [r.value for r in read_archive(path)] == [REPORT_FULL, REPORT_PARTIAL]


def test_at_equal_event_time_cluster_reports_come_first(tmp_path: Path) -> None:
    w = ArchiveWriter(tmp_path, fsync=False)
    snaps = [
        msgspec.structs.replace(s, ts=T0)
        for s in make_snapshots(hosts=2, ticks=1, t0=T0)  # host-0, host-1
    ]
    _add_job(w, _job(T0, "j-p0"), partition=0, offset=0)
    _add_snapshots(w, snaps[:1], partition=0, first=0)
    _add_snapshots(w, snaps[1:], partition=1, first=0)
    _add_job(w, _job(T0 - 1, "earlier"), partition=1, offset=0)
    at_t0 = REPORT_PARTIAL.replace(b"1700000100.0", b"1700000000.0")
    _add_report(w, at_t0, partition=0, offset=9)  # the highest offset of all: no help there
    _add_report(w, REPORT_FULL, partition=0, offset=10)  # T0 + 0.5: after everything at T0
    w.flush()
    got = [(r.ts, r.kind, r.key) for r in read_archive(tmp_path)]
    assert got == [
        (T0 - 1, "jobs", b"earlier"),
        (T0, "cluster", b"ops"),  # the quotas of the instant before its demand
        (T0, "samples", b"host-0"),  # then partition, samples before jobs, offset: as ever
        (T0, "jobs", b"j-p0"),
        (T0, "samples", b"host-1"),
        (T0 + 0.5, "cluster", b"kueue"),
    ]


def test_an_archive_without_a_cluster_folder_reads_as_before(tmp_path: Path) -> None:
    snaps = make_snapshots(hosts=1, ticks=3, t0=T0)
    w = ArchiveWriter(tmp_path, fsync=False)
    _add_snapshots(w, snaps, partition=0, first=0)
    _add_job(w, _job(T0 + 1.5, "j"), partition=0, offset=0)
    w.flush()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs", "samples"]
    got = list(read_archive(tmp_path))
    assert [r.value for r in got] == [
        schema.encode(snaps[0]),
        schema.encode(snaps[1]),
        schema.encode(_job(T0 + 1.5, "j")),
        schema.encode(snaps[2]),
    ]
    assert [r.kind for r in got] == ["samples", "samples", "jobs", "samples"]


def test_row_of_rejects_a_cluster_report_for_another_topic() -> None:
    report = schema.decode_cluster_report(REPORT_PARTIAL)
    with pytest.raises(ValueError, match="does not belong"):
        row_of("jobs", report, key=None, value=b"{}", partition=0, offset=0, timestamp_ms=None)


def test_every_folder_created_is_fsynced_into_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    real = parquet_archive.fsync_dir

    def record(path: Path) -> None:
        synced.append(Path(path))
        real(path)

    monkeypatch.setattr(parquet_archive, "fsync_dir", record)
    monkeypatch.setattr(folders, "fsync_dir", record)
    out = tmp_path / "archive"
    w = ArchiveWriter(out)
    _add_job(w, _job(T0, "a"), partition=0, offset=0)
    (path,) = w.flush()
    hour = path.parent
    date = hour.parent
    # each new folder's entry in its parent (archive/, jobs/, date=, hour=), then the file's
    assert synced == [tmp_path, out, out / "jobs", date, hour]

    synced.clear()
    _add_job(w, _job(T0 + 3600, "b"), partition=0, offset=1)  # a new hour, same date
    (later,) = w.flush()
    assert synced == [date, later.parent]


def test_check_writable_creates_the_folder_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "a" / "archive"
    ArchiveWriter(out).check_writable()
    assert out.is_dir() and not list(out.iterdir())
