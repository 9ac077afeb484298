"""The archive service on a real broker: valid records archived once, invalid ones counted,
offsets committed after the files, and files never committed removed on restart."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe import schema
from dprobe.config import ArchiveSettings, KafkaSettings
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
