"""A plan's events that the broker refuses (here: an event larger than the topic's
``max.message.bytes``) fail the record's delivery, and the transaction is aborted, so a
``read_committed`` reader sees none of that plan, not the events the broker took."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from dprobe.streams.event_fence import FencedEvents
from tests.streams.helpers import consume

pytestmark = pytest.mark.integration


async def test_a_refused_event_aborts_the_whole_plan(kafka) -> None:
    # two partitions: vc-a's event lands on 0, vc-b's (too large) on 1
    topic = await kafka.create_topic(
        "scaling-events", partitions=2, **{"max.message.bytes": "2000"}
    )
    tid = kafka.unique("planning")

    def producer() -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=kafka.bootstrap,
            transactional_id=tid,
            enable_idempotence=True,
            acks="all",
        )

    sink = FencedEvents(producer, topic)
    try:
        with pytest.raises(KafkaError):
            await sink.send_all([(b"vc-a", b"half-a-plan"), (b"vc-b", b"x" * 5000)])
        sink.release()  # the worker exits; the next owner starts afresh
        await sink.send_all([(b"vc-c", b"next-plan")])
    finally:
        await sink.close()
    committed = await consume(
        kafka.bootstrap, topic, until=10**9, timeout_s=10, isolation_level="read_committed"
    )
    assert committed == [b"next-plan"]
