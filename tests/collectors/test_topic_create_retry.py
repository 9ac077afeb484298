"""A samples topic the collector could not create yet (Kafka hung) is created later.

The broker answers the producer's connect and then hangs (its process stopped), so the
first creation of the missing topic times out. The collector must not send before the
topic exists, or a broker that creates topics on demand makes it with its own defaults
(one partition, producer time); it spools, tries again with backoff once Kafka answers,
and then sends everything, in order, to the topic as configured.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.sender import KafkaSender
from dprobe.collectors.spool import Spool
from dprobe.collectors.topic_create import NewTopicSpec
from dprobe.config import KafkaSettings

from .own_broker import broker_pid, own_broker, wait_for
from .test_produce_integration import _layout, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HUNG_S = 6.0


async def test_a_topic_creation_that_times_out_is_retried_before_anything_is_sent(
    tmp_path: Path, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    async with own_broker(tmp_path, request) as broker:
        pid = broker_pid(tmp_path)
        loop = asyncio.get_running_loop()
        connects: list[int] = []

        class HangsAfterFirstConnect(AIOKafkaProducer):  # type: ignore[misc]
            async def start(self) -> None:
                await super().start()
                connects.append(1)
                if len(connects) == 1:  # Kafka hangs right after the first connect
                    os.kill(pid, signal.SIGSTOP)
                    loop.call_later(HUNG_S, os.kill, pid, signal.SIGCONT)

        spool = Spool(tmp_path / "spool", max_bytes=1 << 20, fsync=False)
        spool.open()
        for seq in range(20):
            spool.append(seq, str(seq).encode())
        registry = CollectorRegistry()
        topic = "hung-at-create.samples"
        sender = KafkaSender(
            KafkaSettings(bootstrap=broker.bootstrap, request_timeout_ms=3000),
            topic,
            key=b"h1",
            spool=spool,
            metrics=CollectorMetrics(registry),
            send_timeout_s=2.0,
            producer_factory=lambda: HangsAfterFirstConnect(**sender.producer_config()),
            create=NewTopicSpec(partitions=3),
        )
        with caplog.at_level(logging.WARNING, logger="dprobe"):
            await sender.start()
            try:
                await wait_for(lambda: spool.pending_records == 0, 60, "the spool to drain")
            finally:
                await sender.stop(timeout_s=0)
        assert len(connects) >= 2  # the first connect's creation timed out
        assert await _layout(broker.bootstrap, topic) == (3, "LogAppendTime")
        records = await read_topic(broker.bootstrap, topic, expect=20)
        values = [r.value for r in sorted(records, key=lambda r: r.offset)]
        assert list(dict.fromkeys(values)) == [str(s).encode() for s in range(20)]
        said = [r.getMessage() for r in caplog.records if r.name.startswith("dprobe")]
        assert any(topic in m and "retry" in m for m in said), said
        # Kafka hung before it said whether the topic exists: not said to be missing
        assert any(f"could not learn whether topic {topic} exists" in m for m in said), said


async def test_too_few_brokers_for_the_replication_factor_is_waited_out(
    kafka, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # replication factor 2 on a broker alone, as on a cluster whose other broker restarts:
    # the collector sends nothing (a broker that creates topics on demand would make the
    # topic with its own layout), spools and tries again; once the topic exists (the
    # broker came back, or an operator created it) everything goes, in order
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    spool = Spool(tmp_path / "spool", max_bytes=1 << 20, fsync=False)
    spool.open()
    for seq in range(10):
        spool.append(seq, str(seq).encode())
    topic = kafka.unique("rf") + ".samples"
    sender = KafkaSender(
        KafkaSettings(bootstrap=kafka.bootstrap, request_timeout_ms=3000),
        topic,
        key=b"h1",
        spool=spool,
        metrics=CollectorMetrics(CollectorRegistry()),
        send_timeout_s=2.0,
        create=NewTopicSpec(partitions=2, replication_factor=2),
    )

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if topic in r.getMessage()]

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        with caplog.at_level(logging.WARNING, logger="dprobe"):
            await sender.start()
            try:
                await wait_for(lambda: any("retry" in m for m in said()), 30, "a retry")
                await asyncio.sleep(2.0)
                assert spool.pending_records == 10  # nothing sent meanwhile
                assert topic not in await admin.list_topics()  # nor made on demand
                assert all("InvalidReplicationFactor" in m for m in said()), said()
                assert any(f"topic {topic} is missing and could not" in m for m in said())
                await admin.create_topics([NewTopic(topic, 2, 1)])
                await wait_for(lambda: spool.pending_records == 0, 90, "the spool to drain")
            finally:
                await sender.stop(timeout_s=0)
    finally:
        await admin.close()
    records = await read_topic(kafka.bootstrap, topic, expect=10)
    values = [r.value for r in sorted(records, key=lambda r: r.offset)]
    assert list(dict.fromkeys(values)) == [str(s).encode() for s in range(10)]
