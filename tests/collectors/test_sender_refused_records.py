"""A snapshot the broker refuses for good (larger than the topic's ``max.message.bytes``)
is dropped and counted, and the snapshots after it are delivered; it does not hold up the
host's spool for as long as the spool keeps it."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from prometheus_client import CollectorRegistry

from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.sender import KafkaSender
from dprobe.collectors.spool import Spool
from dprobe.config import KafkaSettings

pytestmark = [pytest.mark.integration]


async def read_all(bootstrap: str, topic: str, timeout_s: float = 5.0) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        got: list[bytes] = []
        while batches := await consumer.getmany(timeout_ms=int(timeout_s * 1000)):
            got += [r.value for records in batches.values() for r in records]
        return got
    finally:
        await consumer.stop()


async def test_a_snapshot_too_large_for_the_topic_is_dropped_and_the_rest_delivered(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"small-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, 1, 1, topic_configs={"max.message.bytes": "2048"})]
        )
    finally:
        await admin.close()
    spool = Spool(tmp_path / "spool", max_bytes=1 << 20, fsync=False)
    spool.open()
    records = [b'{"seq":0}', os.urandom(8192), b'{"seq":2}']  # the middle one cannot fit
    for seq, payload in enumerate(records):
        spool.append(seq, payload)
    registry = CollectorRegistry()
    sender = KafkaSender(
        KafkaSettings(bootstrap=kafka_bootstrap),
        topic,
        key=b"h1",
        spool=spool,
        metrics=CollectorMetrics(registry),
        compression="none",
        send_timeout_s=5.0,
    )
    await sender.start()
    try:
        for _ in range(200):  # a flush would give up at the first failed delivery
            if not spool.pending_records:
                break
            sender.notify()
            await asyncio.sleep(0.1)
    finally:
        await sender.stop(timeout_s=0)
        spool.close()
    assert spool.pending_records == 0
    got = await read_all(kafka_bootstrap, topic)
    # in order; one may come twice around the refused one (consumers drop (host, seq) twins)
    assert list(dict.fromkeys(got)) == [records[0], records[2]]
    dropped = registry.get_sample_value(
        "dprobe_collector_dropped_snapshots_total", {"reason": "too_large"}
    )
    assert dropped == 1
