"""An archive folder is one archive's: files another group, topic prefix or cluster wrote
are never deleted as "uncommitted", and a group whose offsets are gone goes on from the
folder's own record instead of deleting and re-reading what it archived. Against an
in-memory consumer (tests/sinks/test_archive_failures.py); the real broker's side is in
tests/sinks/test_archive_service.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from dprobe.config import ArchiveSettings, KafkaSettings
from dprobe.errors import DprobeError, UsageError
from dprobe.sinks.archive_manifest import MANIFEST_NAME
from dprobe.sinks.archive_service import Archiver
from dprobe.sinks.parquet_archive import list_files
from tests.sinks.test_archive_failures import (
    CLUSTER,
    P0,
    P1,
    PREFIX,
    FakeConsumer,
    _batch,
    fake_kafka,
)


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> FakeConsumer:
    return fake_kafka(monkeypatch)


def _settings(out: Path, *, group: str = "dprobe-archive", prefix: str = PREFIX) -> ArchiveSettings:
    return ArchiveSettings(
        kafka=KafkaSettings(topic_prefix=prefix), out_dir=out, group_id=group,
        flush_interval_s=3600.0,
    )  # fmt: skip


def _names(out: Path) -> list[str]:
    return sorted(f.path.name for f in list_files(out, "jobs"))


async def _archive(out: Path, fake: FakeConsumer, first: int, last: int, **kw: str) -> None:
    async with Archiver(_settings(out, **kw)) as archiver:
        await fake.assign({P0})
        fake.batches.append(_batch(P0, first, last))
        await archiver.poll()


async def test_another_group_is_refused_and_deletes_nothing(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    out = tmp_path / "archive"
    await _archive(out, consumer, 0, 49)
    assert _names(out) == ["jobs-p0-o0-o49.parquet"]
    assert json.loads((out / MANIFEST_NAME).read_text())["committed"] == {"jobs:0": 50}
    consumer.committed_offsets.clear()  # a new group: Kafka has no offset for it
    with pytest.raises(UsageError, match="group 'migrated', not 'dprobe-archive'"):
        await _archive(out, consumer, 0, 9, group="migrated")
    with pytest.raises(UsageError, match=r"topic 'other\.jobs', not 'af\.jobs'"):
        await _archive(out, consumer, 0, 9, prefix="other.")
    CLUSTER[0] = "cluster-b"
    try:
        with pytest.raises(UsageError, match="Kafka cluster 'cluster-b', not 'cluster-a'"):
            await _archive(out, consumer, 0, 9)
    finally:
        CLUSTER[0] = "cluster-a"
    assert _names(out) == ["jobs-p0-o0-o49.parquet"]


async def test_offsets_gone_goes_on_from_the_folder_s_record(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    out = tmp_path / "archive"
    await _archive(out, consumer, 0, 49)
    consumer.committed_offsets.clear()  # expired while the archive was stopped
    async with Archiver(_settings(out)) as archiver:
        await consumer.assign({P0})
        assert consumer.seeks == [(P0, 50)]
        consumer.batches.append(_batch(P0, 50, 59))
        await archiver.poll()
    assert _names(out) == ["jobs-p0-o0-o49.parquet", "jobs-p0-o50-o59.parquet"]


async def test_until_end_does_not_end_on_what_was_read_before_the_folder_s_record(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    """Offsets gone: aiokafka fetches the partition from its beginning while the archive
    places it at the folder's record. A one-off export (--until-end) that took that read
    for the end ended with the records after the record unread (and exit 0)."""
    out = tmp_path / "archive"
    await _archive(out, consumer, 0, 49)
    consumer.committed_offsets.clear()  # expired while the archive was stopped
    consumer.ends[P0] = 60
    position = {P0: 0}
    seek = consumer.seek

    def seek_and_move(tp: TopicPartition, offset: int) -> None:
        seek(tp, offset)
        position[tp] = offset

    async def at(tp: TopicPartition) -> int:
        return position[tp]

    consumer.seek = seek_and_move  # type: ignore[method-assign]
    consumer.position = at  # type: ignore[attr-defined]
    consumer.assignment = lambda: {P0}  # type: ignore[method-assign]
    async with Archiver(_settings(out)) as archiver:
        checks: list[asyncio.Task[bool]] = []

        async def fetch_from_the_beginning() -> None:
            consumer.batches.append(_batch(P0, 0, 59))
            await archiver.poll()
            position[P0] = 60
            checks.append(asyncio.create_task(archiver.caught_up()))  # the run loop's
            await asyncio.sleep(0)

        consumer.while_assigning = fetch_from_the_beginning
        await consumer.assign({P0})
        assert consumer.seeks == [(P0, 50)]
        assert not await checks[0]  # 50 to 59 are still to be read
        consumer.batches.append(_batch(P0, 50, 59))
        await archiver.poll()
        position[P0] = 60
        assert await archiver.caught_up()
    assert _names(out) == ["jobs-p0-o0-o49.parquet", "jobs-p0-o50-o59.parquet"]


async def test_a_topic_created_again_is_refused(tmp_path: Path, consumer: FakeConsumer) -> None:
    out = tmp_path / "archive"
    await _archive(out, consumer, 0, 49)
    consumer.committed_offsets.clear()
    consumer.ends[P0] = 10  # a new topic under the old name: it ends before 50
    with pytest.raises(
        UsageError, match=r"ends at offset 10, but archive folder .* up to offset 50"
    ):
        await _archive(out, consumer, 0, 9)
    assert _names(out) == ["jobs-p0-o0-o49.parquet"]


async def test_a_crash_before_the_first_commit_is_still_cleaned_up(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    """Files this archive wrote and never committed are deleted and read again, cut anew."""
    out = tmp_path / "archive"
    consumer.commit_errors = [RuntimeError("crash")]
    with pytest.raises(RuntimeError):
        await _archive(out, consumer, 0, 49)
    assert _names(out) == ["jobs-p0-o0-o49.parquet"] and consumer.commits == []
    async with Archiver(_settings(out)) as archiver:
        await consumer.assign({P0})
        assert _names(out) == []
        consumer.batches.append(_batch(P0, 0, 29))
        await archiver.poll()
    assert _names(out) == ["jobs-p0-o0-o29.parquet"]


async def test_files_of_an_older_dprobe_are_never_written_over(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    """A folder without a manifest: a partition its group never committed is refused while
    the folder holds files of it; one it did commit goes on as before."""
    out = tmp_path / "archive"
    await _archive(out, consumer, 0, 49)
    (out / MANIFEST_NAME).unlink()
    consumer.committed_offsets.clear()
    with pytest.raises(UsageError, match=r"holds jobs-p0-o0-o49\.parquet, which group"):
        await _archive(out, consumer, 0, 9)
    assert _names(out) == ["jobs-p0-o0-o49.parquet"]
    consumer.batches.clear()  # the refused run's, never read
    consumer.committed_offsets[P0] = 50  # its own group: committed up to 50
    async with Archiver(_settings(out)) as archiver:
        await consumer.assign({P0, P1})  # p1: no file, nothing to write over
        consumer.batches += [_batch(P0, 50, 59), _batch(P1, 0, 4)]
        await archiver.poll()
        await archiver.poll()
    assert _names(out) == [
        "jobs-p0-o0-o49.parquet", "jobs-p0-o50-o59.parquet", "jobs-p1-o0-o4.parquet"
    ]  # fmt: skip
    assert json.loads((out / MANIFEST_NAME).read_text())["committed"] == {"jobs:0": 60, "jobs:1": 5}


async def test_a_damaged_manifest_stops_the_archive_and_says_how_to_go_on(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    """The message's recovery step works: with the manifest moved away, the archive goes on
    where its group committed, and deletes nothing."""
    out = tmp_path / "archive"
    await _archive(out, consumer, 0, 49)
    (out / MANIFEST_NAME).write_text('{"group_id": "dprobe-ar')  # torn by a disk error
    with pytest.raises(UsageError, match=r"dprobe-archive\.json: not a readable .* move it away"):
        await _archive(out, consumer, 50, 59)
    assert _names(out) == ["jobs-p0-o0-o49.parquet"]
    consumer.batches.clear()  # the refused run's, never read
    (out / MANIFEST_NAME).rename(tmp_path / "damaged.json")
    await _archive(out, consumer, 50, 59)
    assert _names(out) == ["jobs-p0-o0-o49.parquet", "jobs-p0-o50-o59.parquet"]
    assert json.loads((out / MANIFEST_NAME).read_text())["committed"] == {"jobs:0": 60}


async def test_a_broker_that_names_no_cluster_matches_the_folder_s_cluster(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    """An empty cluster id (a broker that reports none) is not "another cluster", and the
    folder keeps the id it had."""
    out = tmp_path / "archive"
    await _archive(out, consumer, 0, 49)
    CLUSTER[0] = ""
    try:
        await _archive(out, consumer, 50, 59)
    finally:
        CLUSTER[0] = "cluster-a"
    assert json.loads((out / MANIFEST_NAME).read_text())["cluster_id"] == "cluster-a"
    assert _names(out) == ["jobs-p0-o0-o49.parquet", "jobs-p0-o50-o59.parquet"]


def test_two_members_of_a_group_keep_each_other_s_offsets(tmp_path: Path) -> None:
    """Each member of a group loaded the manifest at its start and commits only its own
    partitions: neither writes back the other's older offsets, and a member taking a
    partition over reads the other's newest."""
    from dprobe.sinks.archive_manifest import ArchiveManifest

    ArchiveManifest("g", "c", {"jobs": "af.jobs"}, {"jobs:0": 5, "jobs:1": 5}).save(tmp_path)
    first, second = ArchiveManifest.load(tmp_path), ArchiveManifest.load(tmp_path)
    assert first is not None and second is not None
    first.record(tmp_path, {"jobs:0": 50})
    second.record(tmp_path, {"jobs:1": 70})
    assert (ArchiveManifest.load(tmp_path) or first).committed == {"jobs:0": 50, "jobs:1": 70}
    first.refresh(tmp_path)  # p1 moves to the first member
    assert first.committed["jobs:1"] == 70


async def test_an_adopted_folder_never_deletes_a_partition_it_has_no_record_of(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    """An older dprobe's folder, both partitions committed; after the upgrade only p0 gets
    records, then the group's offsets expire: p1's files are not taken for uncommitted."""
    out = tmp_path / "archive"
    async with Archiver(_settings(out)) as archiver:
        await consumer.assign({P0, P1})
        consumer.batches += [_batch(P0, 0, 49), _batch(P1, 0, 49)]
        await archiver.poll()
        await archiver.poll()
    (out / MANIFEST_NAME).unlink()  # as an older dprobe left it
    await _archive(out, consumer, 50, 59)  # upgraded: p0 only
    assert json.loads((out / MANIFEST_NAME).read_text())["adopted"] is True
    consumer.committed_offsets.clear()
    with pytest.raises(UsageError, match=r"holds jobs-p1-o0-o49\.parquet"):
        async with Archiver(_settings(out)) as archiver:
            await consumer.assign({P1})
            await archiver.poll()
    assert "jobs-p1-o0-o49.parquet" in _names(out)


async def test_a_failing_assignment_stops_the_archive_instead_of_reading_from_0(
    tmp_path: Path, consumer: FakeConsumer
) -> None:
    from aiokafka.errors import KafkaTimeoutError

    out = tmp_path / "archive"
    await _archive(out, consumer, 0, 49)
    consumer.committed_offsets.clear()  # offsets expired: the manifest places p0 at 50

    async def times_out(_: object) -> None:
        raise KafkaTimeoutError()

    consumer.end_offsets = times_out  # type: ignore[method-assign,assignment]
    with pytest.raises(DprobeError, match=r"partitions af\.jobs-0 were not placed \(Kafka"):
        async with Archiver(_settings(out)) as archiver:
            await consumer.assign({P0})
            consumer.batches.append(_batch(P0, 0, 29))  # what reading from 0 would get
            await archiver.poll()
    assert _names(out) == ["jobs-p0-o0-o49.parquet"]
    assert json.loads((out / MANIFEST_NAME).read_text())["committed"] == {"jobs:0": 50}
