"""The archive service on a real broker: valid records archived once, invalid ones counted,
offsets committed after the files, files never committed removed on restart, cluster
reports archived, and a missing topic never created."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe import schema
from dprobe.config import ArchiveSettings, KafkaSettings
from dprobe.sinks import archive_service
from dprobe.sinks.archive_service import Archiver
from dprobe.sinks.parquet_archive import list_files
from dprobe.traces.archive_reader import read_archive
from tests.streams.helpers import make_snapshots, produce, snapshot_records

pytestmark = [pytest.mark.integration]
T0 = 1_700_000_000.0


async def _topics(bootstrap: str, prefix: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}{t}", 2, 1) for t in ("samples", "jobs")])
    finally:
        await admin.close()


async def _existing(bootstrap: str, prefix: str) -> set[str]:
    """Topics under ``prefix`` (asking for all topics, so that none is created)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {t for t in await admin.list_topics() if t.startswith(prefix)}
    finally:
        await admin.close()


async def _committed(bootstrap: str, group: str, prefix: str) -> dict[str, int]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        out = {}
        for kind in ("samples", "jobs"):
            for p in (0, 1):
                tp = TopicPartition(f"{prefix}{kind}", p)
                out[f"{kind}-{p}"] = await consumer.committed(tp) or 0
        return out
    finally:
        await consumer.stop()


async def test_archive_commits_after_files_and_skips_invalid(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"ar{uuid.uuid4().hex[:8]}."
    group = f"archive-{uuid.uuid4().hex[:8]}"
    await _topics(kafka_bootstrap, prefix)
    snaps = make_snapshots(hosts=2, ticks=25, t0=T0)
    jobs = [
        schema.JobEvent(ts=T0 + i, event="submit", job=f"j{i}", tenant="vc-a", gpus=i + 1)
        for i in range(4)
    ]
    await produce(
        kafka_bootstrap,
        f"{prefix}samples",
        [
            *snapshot_records(snaps[:10]),
            (b"h", b"{not json"),
            *snapshot_records(snaps[10:]),
            (b"h", b'{"v":1,"host":"h"}'),
            (b"h", b'{"v":9}'),
        ],
    )
    await produce(
        kafka_bootstrap,
        f"{prefix}jobs",
        [(e.job.encode(), schema.encode(e)) for e in jobs] + [(b"x", b'{"v":1,"ts":-1}')],
    )
    out = tmp_path / "archive"
    settings = ArchiveSettings(
        kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=prefix),
        out_dir=out,
        group_id=group,
        flush_records=20,  # several flushes, several files per partition
    )
    with caplog.at_level("INFO", logger="dprobe.sinks.archive_service"):
        async with Archiver(settings) as archiver:
            run = archiver.run(asyncio.Event(), until_end=True, progress_every_s=0.0)
            await asyncio.wait_for(run, 60)
    progress = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert progress and progress[-1].startswith("archived ")  # progress while it runs
    assert archiver.records == len(snaps) + len(jobs)
    assert archiver.invalid_records == 4

    # the cluster topic does not exist: archived without it, and not created on the way
    assert await _existing(kafka_bootstrap, prefix) == {f"{prefix}samples", f"{prefix}jobs"}
    assert not (out / "cluster").exists()

    got = list(read_archive(out))
    assert sorted(r.value for r in got) == sorted(
        [schema.encode(s) for s in snaps] + [schema.encode(e) for e in jobs]
    )
    committed = await _committed(kafka_bootstrap, group, prefix)
    assert sum(committed.values()) == len(snaps) + 3 + len(jobs) + 1  # invalid ones too
    files = sorted(f.path for f in list_files(out))

    # A file left behind by a crash between rename and commit (offsets past the commit)
    # is removed when the partition is assigned again; committed files stay untouched.
    samples0 = next(f for f in list_files(out, "samples") if f.partition == 0)
    stray = samples0.path.with_name(
        f"samples-p0-o{committed['samples-0']}-o{committed['samples-0'] + 5}.parquet"
    )
    shutil.copy(samples0.path, stray)
    async with Archiver(settings) as again:
        await asyncio.wait_for(again.run(asyncio.Event(), until_end=True), 60)
    assert again.records == 0
    assert not stray.exists()
    assert sorted(f.path for f in list_files(out)) == files


async def test_cluster_reports_archived_byte_for_byte(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = f"ac{uuid.uuid4().hex[:8]}."
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:  # as dprobe cluster publish creates it: one partition, compacted
        compact = {"cleanup.policy": "compact"}
        await admin.create_topics([NewTopic(f"{prefix}cluster", 1, 1, topic_configs=compact)])
    finally:
        await admin.close()
    reports = [
        (b"kueue", b'{"v":1,"ts":1700000000.0,"source":"kueue","capacity_gpus":64,'
                   b'"quotas":{"vc-a":40,"vc-b":24},"complete":true}'),
        (b"ops", b'{"source": "ops", "v": 1, "ts": 1700000030.5, "quotas": {"vc-c": 8}}'),
    ]  # fmt: skip
    invalid = (b"kueue", b'{"v":1,"ts":1700000060.0,"source":"kueue","quotas":{"vc-a":-1}}')
    retired = (b"ops", None)  # a tombstone: the source retired, no report and not invalid
    await produce(kafka_bootstrap, f"{prefix}cluster", [reports[0], invalid, reports[1], retired])
    out = tmp_path / "archive"
    settings = ArchiveSettings(
        kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=prefix),
        out_dir=out,
        group_id=f"archive-{uuid.uuid4().hex[:8]}",
    )
    async with Archiver(settings) as archiver:
        await asyncio.wait_for(archiver.run(asyncio.Event(), until_end=True), 60)
    assert (archiver.records, archiver.invalid_records) == (2, 1)
    assert [(r.kind, r.key, r.value) for r in read_archive(out)] == [
        ("cluster", key, value) for key, value in reports
    ]
    assert [f.path.name for f in list_files(out)] == ["cluster-p0-o0-o2.parquet"]
    # neither samples nor jobs existed: the archive created neither
    assert await _existing(kafka_bootstrap, prefix) == {f"{prefix}cluster"}


async def test_until_end_with_no_topic_at_all_ends_and_creates_none(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"an{uuid.uuid4().hex[:8]}."
    settings = ArchiveSettings(
        kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=prefix),
        out_dir=tmp_path / "archive",
        group_id=f"archive-{uuid.uuid4().hex[:8]}",
    )
    with caplog.at_level("INFO", logger="dprobe.sinks.archive_service"):
        async with Archiver(settings) as archiver:
            await asyncio.wait_for(archiver.run(asyncio.Event(), until_end=True), 30)
    assert archiver.records == 0
    assert await _existing(kafka_bootstrap, prefix) == set()
    # it ends at once: the log does not promise to archive the topics once they appear
    missing = [r.getMessage() for r in caplog.records if "does not exist" in r.getMessage()]
    assert missing == [
        f"topic {prefix}{kind} does not exist (or is not visible); nothing to archive of it"
        for kind in ("samples", "jobs", "cluster")
    ]


async def test_until_end_ends_on_a_topic_that_is_still_being_written_to(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A one-off export while the fleet keeps sending: it archives at least what was there
    when it started and ends, instead of chasing the end forever."""
    prefix = f"al{uuid.uuid4().hex[:8]}."
    await _topics(kafka_bootstrap, prefix)
    snaps = make_snapshots(hosts=4, ticks=50, t0=T0)
    await produce(kafka_bootstrap, f"{prefix}samples", snapshot_records(snaps))
    more = make_snapshots(hosts=4, ticks=2_000, t0=T0 + 50, seed=9)
    stop_sending = asyncio.Event()

    async def keep_sending() -> None:
        async with AIOKafkaProducer(bootstrap_servers=kafka_bootstrap) as producer:
            for key, value in snapshot_records(more):  # one every 10 ms, longer than the test
                if stop_sending.is_set():
                    return
                await producer.send_and_wait(f"{prefix}samples", value, key=key)
                await asyncio.sleep(0.01)

    sender = asyncio.create_task(keep_sending())
    settings = ArchiveSettings(
        kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=prefix),
        out_dir=tmp_path / "archive",
        group_id=f"archive-{uuid.uuid4().hex[:8]}",
    )
    try:
        await asyncio.sleep(1.0)  # the topic is being written to before the export starts
        async with Archiver(settings) as archiver:
            await asyncio.wait_for(archiver.run(asyncio.Event(), until_end=True), 60)
    finally:
        stop_sending.set()
        await sender
    assert not sender.exception()
    archived = {r.value for r in read_archive(tmp_path / "archive")}
    assert {schema.encode(s) for s in snaps} <= archived
    assert len(archived) < len(snaps) + len(more)  # it did not wait for the sender to end


async def test_a_new_folder_of_a_group_that_archived_elsewhere_says_what_it_lacks(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A new folder (a new data volume) with the group of an archive kept elsewhere starts
    at the group's committed offsets: it warns that the records before them are not in
    it, instead of staying silently empty; the group's own folder does not."""
    prefix = f"aw{uuid.uuid4().hex[:8]}."
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}jobs", 1, 1)])
    finally:
        await admin.close()
    jobs = [
        schema.JobEvent(ts=T0 + i, event="submit", job=f"j{i}", tenant="vc-a", gpus=1)
        for i in range(5)
    ]
    await produce(
        kafka_bootstrap, f"{prefix}jobs", [(e.job.encode(), schema.encode(e)) for e in jobs]
    )
    group = f"archive-{uuid.uuid4().hex[:8]}"

    async def archive(out: Path) -> list[str]:
        settings = ArchiveSettings(
            kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=prefix),
            out_dir=out,
            group_id=group,
        )
        caplog.clear()
        with caplog.at_level("WARNING", logger="dprobe.sinks.archive_service"):
            async with Archiver(settings) as archiver:
                await asyncio.wait_for(archiver.run(asyncio.Event(), until_end=True), 60)
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    assert await archive(tmp_path / "first") == []
    assert len(list(read_archive(tmp_path / "first"))) == len(jobs)
    said = await archive(tmp_path / "new")
    assert not list(list_files(tmp_path / "new"))
    assert len(said) == 1
    assert f"{prefix}jobs partition 0 (offsets 0 to 4)" in said[0] and group in said[0]
    assert await archive(tmp_path / "first") == []  # its own folder: nothing missing


async def test_records_read_again_after_a_rebalance_are_counted_once(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A topic that appears rebalances the archive while its files are not committed
    (Kafka refuses that commit): it reads those records again. The counts it reports,
    invalid records included, are those of the topic, not of the reads."""
    monkeypatch.setattr(archive_service, "_METADATA_MAX_AGE_MS", 300)  # sees the topic soon
    prefix = f"ax{uuid.uuid4().hex[:8]}."
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}samples", 1, 1)])
        snaps = make_snapshots(hosts=1, ticks=3, t0=T0)
        invalid = [(b"h", b"{not json"), (b"h", b'{"v":9}')]
        await produce(kafka_bootstrap, f"{prefix}samples", [*snapshot_records(snaps), *invalid])
        settings = ArchiveSettings(
            kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=prefix),
            out_dir=tmp_path / "archive",
            group_id=f"archive-{uuid.uuid4().hex[:8]}",
            flush_interval_s=3600.0,
        )
        with caplog.at_level("INFO", logger="dprobe.sinks.parquet_archive"):
            async with Archiver(settings) as archiver:
                while archiver.records + archiver.invalid_records < 5:
                    await archiver.poll()
                await admin.create_topics([NewTopic(f"{prefix}jobs", 1, 1)])
                for _ in range(40):  # the rebalance: flushed, not committed, read again
                    await archiver.poll(timeout_ms=100)
                    if archiver.records > len(snaps):
                        break
    finally:
        await admin.close()
    read_again = archiver.records > len(snaps)
    if not read_again:
        pytest.skip("Kafka took the commit at the rebalance: nothing was read again")
    assert "removed 1 uncommitted archive file(s)" in caplog.text
    assert (archiver.writer.records_written, archiver.invalid_records) == (len(snaps), 2)
