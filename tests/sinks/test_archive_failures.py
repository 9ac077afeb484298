"""The archive service when things fail, against an in-memory consumer: a flush that fails
at a rebalance stops the archive and commits nothing past the files, a partition assigned
again is read again from its committed offset, a commit refused for the moment is retried
at the next flush, and an unwritable folder or a full disk ends ``dprobe archive`` with a
one-line error."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaTimeoutError

from dprobe import cli, schema
from dprobe.config import ArchiveSettings, KafkaSettings
from dprobe.errors import UsageError
from dprobe.sinks import archive_service, parquet_archive
from dprobe.sinks.archive_service import Archiver
from dprobe.sinks.parquet_archive import list_files

log = logging.getLogger(__name__)
T0 = 1_700_000_000.0
PREFIX = "af."
JOBS = f"{PREFIX}jobs"
P0, P1 = TopicPartition(JOBS, 0), TopicPartition(JOBS, 1)


def _record(offset: int) -> SimpleNamespace:
    ev = schema.JobEvent(ts=T0 + offset, event="submit", job=f"j{offset}", tenant="a", gpus=1)
    return SimpleNamespace(
        offset=offset, key=ev.job.encode(), value=schema.encode(ev), timestamp=None
    )


def _batch(tp: TopicPartition, first: int, last: int) -> dict[TopicPartition, Any]:
    return {tp: [_record(o) for o in range(first, last + 1)]}


class FakeConsumer:
    """What the archiver uses of AIOKafkaConsumer. ``batches`` are returned by getmany in
    turn (a callable is called first: a rebalance during the fetch); ``commit_errors``
    are raised by the next commits. Polling on long after the last batch fails the test
    (an archive that should have stopped)."""

    IDLE_POLLS = 100

    def __init__(self, **_: Any) -> None:
        self.batches: list[Any] = []
        self.commits: list[dict[TopicPartition, int]] = []
        self.commit_errors: list[Exception] = []
        self.committed_offsets: dict[TopicPartition, int] = {}
        self.listener: ConsumerRebalanceListener | None = None
        self.stopped = False
        self.idle_polls = 0
        self.ends: dict[TopicPartition, int] = {}
        self.while_assigning: Callable[[], Awaitable[object]] | None = None
        self.seeks: list[tuple[TopicPartition, int]] = []

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    async def topics(self) -> set[str]:
        return {JOBS}

    def subscribe(self, *, pattern: str, listener: ConsumerRebalanceListener) -> None:
        self.listener = listener

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, Any]:
        if not self.batches:
            self.idle_polls += 1
            if self.idle_polls > self.IDLE_POLLS:
                raise AssertionError("polled on and on: the archive did not stop")
            return {}
        batch = self.batches.pop(0)
        return await batch() if callable(batch) else batch

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self.commit_errors:
            raise self.commit_errors.pop(0)
        self.commits.append(dict(offsets))
        self.committed_offsets.update(offsets)

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.committed_offsets.get(tp)

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if self.while_assigning is not None:  # aiokafka fetches while the listener runs
            fetch, self.while_assigning = self.while_assigning, None
            await fetch()
        return dict.fromkeys(tps, 0)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.ends.get(tp, 1_000) for tp in tps}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))

    def assignment(self) -> set[TopicPartition]:
        return set()

    async def assign(self, tps: set[TopicPartition]) -> None:
        """A rebalance, as aiokafka runs it: an error of the listener is logged, no more."""
        assert self.listener is not None
        try:
            await self.listener.on_partitions_assigned(tps)
        except Exception:
            log.exception("listener failed on_partitions_assigned")

    async def revoke(self, tps: set[TopicPartition]) -> None:
        assert self.listener is not None
        try:
            await self.listener.on_partitions_revoked(tps)
        except Exception:
            log.exception("listener failed on_partitions_revoked")


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> FakeConsumer:
    return fake_kafka(monkeypatch)


def fake_kafka(monkeypatch: pytest.MonkeyPatch) -> FakeConsumer:
    """Make the archiver's consumer a :class:`FakeConsumer` on a cluster of id ``CLUSTER[0]``."""
    fake = FakeConsumer()
    monkeypatch.setattr(archive_service, "AIOKafkaConsumer", lambda **kw: fake)
    monkeypatch.setattr(archive_service, "kafka_cluster_id", _cluster_id)
    return fake


CLUSTER = ["cluster-a"]  # the id the fake Kafka reports; a test may change it


async def _cluster_id(_: KafkaSettings) -> str:
    return CLUSTER[0]


def _settings(out: Path, **kw: Any) -> ArchiveSettings:
    kw.setdefault("flush_interval_s", 3600.0)
    return ArchiveSettings(kafka=KafkaSettings(topic_prefix=PREFIX), out_dir=out, **kw)


def _held(out: Path, tp: TopicPartition) -> int:
    """The offset up to which the files of ``tp`` hold every record (from 0)."""
    end = 0
    for f in sorted(
        (f for f in list_files(out, "jobs") if f.partition == tp.partition), key=lambda f: f.first
    ):
        if f.first <= end:
            end = max(end, f.last + 1)
    return end


def _disk_full(*_: Any, **__: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


async def test_failed_flush_at_a_revoke_stops_and_commits_nothing_past_the_files(
    tmp_path: Path, consumer: FakeConsumer, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "archive"
    failure: Exception | None = None
    try:
        async with Archiver(_settings(out)) as archiver:
            await consumer.assign({P0})
            consumer.batches.append(_batch(P0, 0, 99))
            await archiver.poll()
            with monkeypatch.context() as disk:
                disk.setattr(parquet_archive.pq, "write_table", _disk_full)
                await consumer.revoke({P0})
            await consumer.assign({P0, P1})  # the disk has room again
            consumer.batches.append(_batch(P1, 0, 0))  # p0 is fetched again from 0, later
            await archiver.poll()
            await archiver.flush()
    except OSError as exc:
        failure = exc
    for offsets in consumer.commits:
        for tp, offset in offsets.items():
            assert offset <= _held(out, tp), f"{tp} committed at {offset} past its files"
    assert isinstance(failure, parquet_archive.ArchiveWriteError)
    assert "No space left on device" in str(failure) and "jobs-p0-o0-o99" in str(failure)
    assert consumer.stopped


async def test_partition_assigned_again_is_read_again_not_committed_from_memory(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    """A subscription change can rebalance with nothing revoked: what was read of a
    partition assigned again is forgotten with its buffered rows, never committed."""
    out = tmp_path / "archive"
    async with Archiver(_settings(out)) as archiver:
        await consumer.assign({P0})
        consumer.batches.append(_batch(P0, 0, 99))
        await archiver.poll()
        await consumer.revoke(set())
        await consumer.assign({P0, P1})
        consumer.batches.append(_batch(P1, 0, 0))
        await archiver.poll()
        await archiver.flush()
    assert consumer.commits == [{P1: 1}]
    assert _held(out, P0) == 0


async def test_commit_refused_for_now_is_retried_at_the_next_flush(
    tmp_path: Path, consumer: FakeConsumer, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "archive"
    async with Archiver(_settings(out, flush_records=10)) as archiver:
        await consumer.assign({P0})
        # the pattern subscription just changed (a new topic appeared), then a timeout
        consumer.commit_errors = [
            IllegalStateError("No partitions assigned"),
            KafkaTimeoutError(),
        ]
        with caplog.at_level("WARNING", logger="dprobe.sinks.archive_service"):
            for first in (0, 10):
                consumer.batches.append(_batch(P0, first, first + 9))
                assert await archiver.poll() == 10  # flushed; the commit failed, no raise
        assert consumer.commits == []
        warnings = [r for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and "IllegalStateError" in warnings[0].getMessage()
        consumer.batches.append(_batch(P0, 20, 29))
        await archiver.poll()
    assert consumer.commits == [{P0: 30}]
    assert _held(out, P0) == 30


async def test_unwritable_folder_is_refused_at_start(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    (tmp_path / "file").write_text("not a folder")
    archiver = Archiver(_settings(tmp_path / "file" / "archive"))
    with pytest.raises(UsageError, match=r"archive folder .*file/archive is not writable"):
        await archiver.start()
    assert consumer.listener is None  # refused before joining the group
    await archiver.stop()


def _cli(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.delenv("DPROBE_CONFIG", raising=False)
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", PREFIX)
    return cli.main(["archive", *argv])


def test_cli_unwritable_folder_exits_2_naming_it(
    tmp_path: Path,
    consumer: FakeConsumer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "archive"
    assert _cli(monkeypatch, "--out", str(out), "--until-end") == 2
    err = capsys.readouterr().err
    assert f"dprobe archive: archive folder {out} is not writable" in err


def test_cli_full_disk_exits_1_with_one_line_and_commits_nothing(
    tmp_path: Path,
    consumer: FakeConsumer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    writes: list[object] = []

    def disk_full(table: object, where: object, **kw: object) -> None:
        writes.append(where)
        _disk_full()

    async def rebalance_then_fetch() -> dict[TopicPartition, Any]:
        await consumer.assign({P0})
        return _batch(P0, 0, 4)

    consumer.batches.append(rebalance_then_fetch)
    monkeypatch.setattr(parquet_archive.pq, "write_table", disk_full)
    out = tmp_path / "archive"
    assert _cli(monkeypatch, "--out", str(out), "--flush-records", "5") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    path = out / "jobs" / "date=2023-11-14" / "hour=22" / "jobs-p0-o0-o4.parquet"
    assert err.strip().splitlines()[-1] == (
        f"dprobe archive: cannot write {path}: No space left on device"
    )
    assert consumer.commits == [] and consumer.stopped
    assert len(writes) == 1  # stopping did not try the failed flush again


async def test_invalid_records_are_named_then_counted_not_logged_each(
    tmp_path: Path, consumer: FakeConsumer, caplog: pytest.LogCaptureFixture
) -> None:
    bad = [SimpleNamespace(offset=o, key=b"j", value=b"{not json", timestamp=None) for o in (5, 6)]
    async with Archiver(_settings(tmp_path / "archive")) as archiver:
        await consumer.assign({P0})
        consumer.batches.append({P0: [_record(4), *bad, _record(7)]})
        with caplog.at_level("WARNING", logger="dprobe.sinks.archive_service"):
            await archiver.poll()
    said = [r.getMessage() for r in caplog.records if "not archived" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"{JOBS} partition 0 offset 5 not archived: ")
    assert archiver.invalid_records == 2 and archiver.records == 2


async def test_records_fetched_while_the_assignment_is_handled_are_kept(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    """aiokafka sets the new assignment and fetches it while the rebalance listener still
    runs: what it reads meanwhile is from the new positions and must reach the files (it
    was dropped with the rows read before the rebalance, and never read again)."""
    out = tmp_path / "archive"
    async with Archiver(_settings(out)) as archiver:
        consumer.batches.append(_batch(P0, 0, 29))
        consumer.while_assigning = archiver.poll
        await consumer.assign({P0})  # no committed offset: read from the beginning
        assert archiver.records == 30
    assert _held(out, P0) == 30 and consumer.commits == [{P0: 30}]
