"""The collector on a real Kafka broker: keyed by host, ordered, seq persisted."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry

from dprobe.collectors.assemble import build_collector
from dprobe.config import CollectorSettings, KafkaSettings
from dprobe.schema import decode_snapshot

pytestmark = pytest.mark.integration


async def read_topic(bootstrap: str, topic: str, expect: int, timeout_s: float = 30.0) -> list:
    """Every record of ``topic`` (all partitions) once ``expect`` have arrived or time is up."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    out = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while len(out) < expect and loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                out += records
    finally:
        await consumer.stop()
    return out


def settings_for(bootstrap: str, tmp_path: Path, **kw) -> CollectorSettings:
    return CollectorSettings(
        kafka=KafkaSettings(bootstrap=bootstrap),
        host_id=kw.pop("host_id", "node-7"),
        interval_s=1.0,
        clock_speed=kw.pop("clock_speed", 50.0),
        spool_dir=tmp_path / "spool",
        state_dir=tmp_path / "state",
        synthetic_gpus=2,
        spool_fsync=False,
        **kw,
    )


async def test_snapshots_reach_kafka_in_order_and_seq_survives_a_restart(kafka, tmp_path) -> None:
    topic = await kafka.create_topic("samples", partitions=3)
    settings = settings_for(kafka.bootstrap, tmp_path)
    first = build_collector(settings, registry=CollectorRegistry(), topic=topic, max_ticks=12)
    async with first:
        await first.wait()
    assert first.spool.pending_records == 0  # stop() flushed everything
    second = build_collector(settings, registry=CollectorRegistry(), topic=topic, max_ticks=5)
    async with second:
        await second.wait()

    records = await read_topic(kafka.bootstrap, topic, expect=17)
    assert {r.key for r in records} == {b"node-7"}
    assert len({r.partition for r in records}) == 1  # key = host: one partition, one order
    snaps = [decode_snapshot(r.value) for r in sorted(records, key=lambda r: r.offset)]
    assert [s.seq for s in snaps] == list(range(17))
    assert all(s.host == "node-7" and len(s.gpus) == 2 for s in snaps)
    run1 = [s.ts for s in snaps[:12]]
    assert run1 == sorted(run1)  # time moves forward within a run


async def _layout(bootstrap: str, topic: str) -> tuple[int, str]:
    """(partitions, message.timestamp.type) of ``topic``."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        configs = {c[0]: c[1] for c in response.resources[0][4]}
    finally:
        await admin.close()
    return len(described[0]["partitions"]), configs["message.timestamp.type"]


async def test_a_missing_samples_topic_is_created_as_configured_not_by_the_broker(
    kafka, tmp_path
) -> None:
    """A broker that creates topics on demand would give the first collector's topic its
    own defaults (one partition, producer time); the collector creates it first."""
    topic = f"created-{uuid.uuid4().hex[:8]}.samples"
    settings = settings_for(kafka.bootstrap, tmp_path, partitions=3)
    collector = build_collector(settings, registry=CollectorRegistry(), topic=topic, max_ticks=3)
    async with collector:
        await collector.wait()
    assert len(await read_topic(kafka.bootstrap, topic, expect=3)) == 3
    assert await _layout(kafka.bootstrap, topic) == (3, "LogAppendTime")

    existing = await kafka.create_topic("samples", partitions=2)
    other = build_collector(
        settings_for(kafka.bootstrap, tmp_path / "b", partitions=5),
        registry=CollectorRegistry(),
        topic=existing,
        max_ticks=2,
    )
    async with other:
        await other.wait()
    assert (await _layout(kafka.bootstrap, existing))[0] == 2  # an existing topic stays


async def test_the_first_snapshots_into_a_topic_it_created_are_sent_without_retries(
    kafka, tmp_path, caplog
) -> None:
    """A topic created a moment ago has no partition leader ready for a moment: snapshots
    sent at once were retried, each with a NotLeaderForPartition warning in the
    collector's log at its first start. It waits until every partition answers."""
    for attempt in range(4):  # the race is lost in most runs without the wait
        topic = f"fresh-{uuid.uuid4().hex[:8]}.samples"
        settings = settings_for(kafka.bootstrap, tmp_path / str(attempt), partitions=4)
        collector = build_collector(
            settings, registry=CollectorRegistry(), topic=topic, max_ticks=8
        )
        with caplog.at_level(logging.WARNING, logger="aiokafka"):
            async with collector:
                await collector.wait()
        assert len(await read_topic(kafka.bootstrap, topic, expect=8)) == 8
    retried = [r.getMessage() for r in caplog.records if r.name.startswith("aiokafka")]
    assert retried == []
