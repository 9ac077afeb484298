"""The archive keeps a valid record larger than the worker's default 1 MiB limit: a worker
whose ``max_message_bytes`` was raised takes it, so it must be in the archive too."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe import schema
from dprobe.config import ArchiveSettings, KafkaSettings
from dprobe.sinks.archive_service import Archiver
from dprobe.traces.archive_reader import read_archive

pytestmark = [pytest.mark.integration]
GIB = 1 << 30


def big_snapshot() -> schema.HostSnapshot:
    """A valid snapshot of 8 GPUs and 12,000 processes: about 1.3 MB of JSON."""
    gpus = tuple(
        schema.Gpu(
            uuid=f"GPU-{i}", index=i, util=50.0, mem_util=20.0, mem_used=GIB, mem_total=80 * GIB,
            power_w=300.0,
        )
        for i in range(8)
    )  # fmt: skip
    procs = tuple(
        schema.Proc(
            pid=10_000 + n, gpu=f"GPU-{n % 8}", tenant=f"vc-{n % 5}", job=f"job-{n}",
            sm_util=10.0, mem_util=5.0, mem_used=1 << 20,
        )
        for n in range(12_000)
    )  # fmt: skip
    return schema.HostSnapshot(
        host="big-host", ts=1_700_000_000.0, interval_s=10.0, seq=0, gpus=gpus, procs=procs
    )


async def test_a_valid_record_over_one_mib_is_archived(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"al{uuid.uuid4().hex[:8]}."
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}samples", 1, 1)])
    finally:
        await admin.close()
    value = schema.encode(big_snapshot())
    assert len(value) > schema.DEFAULT_MAX_BYTES
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, compression_type="gzip", max_request_size=8 << 20
    )
    async with producer:  # compressed, the batch is well under the broker's limit
        await producer.send_and_wait(f"{prefix}samples", key=b"big-host", value=value)
    settings = ArchiveSettings(
        kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=prefix),
        out_dir=tmp_path / "archive",
        group_id=f"archive-{uuid.uuid4().hex[:8]}",
    )
    async with Archiver(settings) as archiver:
        await asyncio.wait_for(archiver.run(asyncio.Event(), until_end=True), 60)
    assert (archiver.records, archiver.invalid_records) == (1, 0)
    assert [r.value for r in read_archive(tmp_path / "archive")] == [value]
