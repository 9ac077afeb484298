"""Which samples partitions count as quiet at a takeover, asked of a real broker: only a
partition with nothing left for the group to read and no record newer than the quiet
time, by the broker's clock (the topic stamps records with ``LogAppendTime``, as the
topics the worker creates do)."""

from __future__ import annotations

import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from dprobe.streams.quiet_sources import quiet_partitions
from tests.conftest import KafkaHelper

pytestmark = pytest.mark.integration


async def test_only_a_partition_read_to_its_end_and_quiet_long_enough_is_quiet(
    kafka: KafkaHelper,
) -> None:
    topic = await kafka.create_topic(
        "samples", partitions=4, **{"message.timestamp.type": "LogAppendTime"}
    )
    # partition 0: never written; 1: written, read to its end; 2: written, its last
    # record not read yet; 3: written, the group has never committed anything there
    ends = {1: 3, 2: 3, 3: 2}
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    async with producer:
        for partition, count in ends.items():
            for i in range(count):
                await producer.send_and_wait(topic, b"x%d" % i, partition=partition)
    written_at = time.time()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap, group_id=f"quiet-{uuid.uuid4().hex[:8]}"
    )
    async with consumer:
        tps = [TopicPartition(topic, p) for p in range(4)]
        consumer.assign(tps)
        await consumer.commit({tps[1]: 3, tps[2]: 2})
        # just written: only the partition that never held a record is quiet
        assert await quiet_partitions(consumer, topic, range(4), 30.0) == {0}
        # a minute later, by the same clock: the one read to its end is quiet too; the
        # one with a record left and the one the group never read are not
        later = written_at + 60.0
        assert await quiet_partitions(consumer, topic, range(4), 30.0, now=later) == {0, 1}
        # a quiet time longer than the records' age: not quiet yet
        assert await quiet_partitions(consumer, topic, [1], 90.0, now=later) == set()
        # once the group has read the rest, it is
        await consumer.commit({tps[2]: 3, tps[3]: 2})
        assert await quiet_partitions(consumer, topic, range(4), 30.0, now=later) == {0, 1, 2, 3}
        assert await quiet_partitions(consumer, topic, [], 30.0) == set()
