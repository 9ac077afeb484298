"""Consumer lag on the real broker: end offset minus committed offset per partition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from prometheus_client import CollectorRegistry

from dprobe.sinks.consumer_lag import ConsumerLag
from dprobe.sinks.worker_metrics import WorkerCollector
from dprobe.sinks.worker_stats import WorkerStats

pytestmark = pytest.mark.integration


async def _produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        for partition, n in per_partition.items():
            for i in range(n):
                await producer.send(topic, f"{i}".encode(), partition=partition)
        await producer.flush()


async def _commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    # no auto-commit: on stop it would commit the position it fetched at assign time
    # (the old committed offset) over the offsets committed here, now and then
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
    finally:
        await consumer.stop()


async def test_lag_is_end_minus_committed_per_partition_and_summed(kafka) -> None:
    topic = await kafka.create_topic("lag", partitions=3)
    group = kafka.unique("group")
    await _produce(kafka.bootstrap, topic, {0: 10, 1: 6, 2: 4})
    await _commit(
        kafka.bootstrap, group, {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 6}
    )
    reg = CollectorRegistry()
    async with ConsumerLag(kafka.settings, group, [topic], interval_s=60) as lag:
        WorkerCollector(WorkerStats(), registry=reg, lag=lag)
        got = await lag.refresh()
        # partition 2 was never committed: the group would read all 4 records from earliest
        assert got == {(topic, 0): 7, (topic, 1): 0, (topic, 2): 4}
        labels = {"consumergroup": group, "topic": topic}
        assert reg.get_sample_value("dprobe_worker_consumer_lag_sum", labels) == 11.0
        assert (
            reg.get_sample_value("dprobe_worker_consumer_lag", {**labels, "partition": "0"}) == 7.0
        )
        await _produce(kafka.bootstrap, topic, {1: 5})
        await _commit(kafka.bootstrap, group, {TopicPartition(topic, 0): 10})
        assert await lag.refresh() == {(topic, 0): 0, (topic, 1): 5, (topic, 2): 4}
        assert reg.get_sample_value("dprobe_worker_consumer_lag_sum", labels) == 9.0
        assert lag.errors == 0
    await lag.stop()  # idempotent


async def test_background_task_refreshes_on_its_cadence_and_skips_missing_topics(
    kafka, caplog
) -> None:
    topic = await kafka.create_topic("cadence", partitions=1)
    group = kafka.unique("group")
    missing = kafka.unique("never-created")
    lag = ConsumerLag(kafka.settings, group, [topic, missing], interval_s=0.2)
    await lag.start()
    try:
        await _produce(kafka.bootstrap, topic, {0: 3})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # no explicit refresh: the background task
            if lag.lags.get((topic, 0)) == 3:  # picks it up
                break
            await asyncio.sleep(0.1)
        assert lag.lags == {(topic, 0): 3}
        assert lag.updated_at is not None
        assert lag.errors == 0
        # a misspelt topic is named once, however many refreshes miss it
        said = [r.getMessage() for r in caplog.records if missing in r.getMessage()]
        assert said == [
            f"consumer lag of group {group}: topic {missing} does not exist, so no lag is "
            "measured for it (check the topic names given; it is read once it exists)"
        ]
    finally:
        await lag.stop()


async def test_refresh_failures_are_counted_and_polling_continues(kafka, caplog) -> None:
    from aiokafka.errors import KafkaConnectionError

    topic = await kafka.create_topic("fail", partitions=1)
    lag = ConsumerLag(kafka.settings, kafka.unique("group"), [topic], interval_s=0.05)
    await lag.start()
    real = lag.refresh
    calls = {"n": 0}

    async def flaky() -> object:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise KafkaConnectionError("broker went away")
        return await real()

    lag.refresh = flaky  # type: ignore[method-assign]  # inject a failure, then recovery
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if calls["n"] > 3:
                break
            await asyncio.sleep(0.05)
        assert lag.errors >= 2
        assert calls["n"] > 3  # the task kept going after the failures
        assert "refresh failed" in caplog.text
    finally:
        await lag.stop()


async def test_an_unreachable_kafka_never_fails_the_caller() -> None:
    import socket

    from dprobe.config import KafkaSettings

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the socket is closed
    lag = ConsumerLag(KafkaSettings(bootstrap=f"127.0.0.1:{port}"), "g", ["t"], interval_s=0.05)
    await lag.start()  # does not raise: the task retries
    try:
        for _ in range(100):
            if lag.errors >= 2:
                break
            await asyncio.sleep(0.05)
        assert lag.errors >= 2
        assert lag.lags == {} and lag.updated_at is None
    finally:
        await lag.stop()


def test_interval_must_be_positive() -> None:
    from dprobe.config import KafkaSettings

    with pytest.raises(ValueError, match="interval_s"):
        ConsumerLag(KafkaSettings(), "g", ["t"], interval_s=0)


async def test_without_topics_a_group_keeps_the_topics_it_was_seen_to_commit_on(
    kafka, monkeypatch
) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    topic = await kafka.create_topic("expiry", partitions=1)
    group = kafka.unique("group")
    await _produce(kafka.bootstrap, topic, {0: 8})
    await _commit(kafka.bootstrap, group, {TopicPartition(topic, 0): 5})
    lag = ConsumerLag(kafka.settings, group, [], interval_s=60)
    try:
        assert await lag.refresh() == {(topic, 0): 3}
        # Kafka expires the offsets of a group that has been empty for a week
        # (offsets.retention.minutes): the group then lists no committed topics at all
        real = AIOKafkaAdminClient.list_consumer_group_offsets

        async def expired(self, group_id, *args, partitions=None, **kw):  # type: ignore[no-untyped-def]
            if partitions is None:
                return {}
            return dict.fromkeys(partitions)

        monkeypatch.setattr(AIOKafkaAdminClient, "list_consumer_group_offsets", expired)
        # the group would read the whole topic again: its lag is all 8 records, not gone
        assert await lag.refresh() == {(topic, 0): 8}
        monkeypatch.setattr(AIOKafkaAdminClient, "list_consumer_group_offsets", real)
        assert await lag.refresh() == {(topic, 0): 3}
    finally:
        await lag.stop()


async def test_without_topics_a_group_that_committed_nothing_is_named_once(kafka, caplog) -> None:
    """A misspelt group (or a worker's app_id changed elsewhere) has no lag to show: said
    once, so an exporter that can never alert does not stay silent; read once it commits."""
    topic = await kafka.create_topic("nocommit", partitions=1)
    group = kafka.unique("misspelt-group")
    await _produce(kafka.bootstrap, topic, {0: 4})
    lag = ConsumerLag(kafka.settings, group, [], interval_s=60)
    try:
        for _ in range(3):
            assert await lag.refresh() == {}
        said = [r for r in caplog.records if group in r.getMessage()]
        assert [(r.levelname, r.getMessage()) for r in said] == [
            (
                "WARNING",
                f"consumer lag of group {group}: the group has committed no offsets, so no "
                "lag is measured for it (check the group name: a worker group's is its "
                "app_id; it is read once the group commits, or from the start when its "
                "topics are named)",
            )
        ]
        await _commit(kafka.bootstrap, group, {TopicPartition(topic, 0): 1})
        assert await lag.refresh() == {(topic, 0): 3}
        assert len([r for r in caplog.records if group in r.getMessage()]) == 1
    finally:
        await lag.stop()


async def test_a_group_that_cannot_be_described_keeps_its_lags(kafka, monkeypatch) -> None:
    """A coordinator still loading answers a describe with an error: the member count is
    then unknown (None), and the lags measured in the same refresh still stand."""
    from aiokafka.errors import GroupLoadInProgressError

    import dprobe.sinks.consumer_lag as consumer_lag

    topic = await kafka.create_topic("lag-members", partitions=1)
    group = kafka.unique("group")
    await _produce(kafka.bootstrap, topic, {0: 5})

    async def loading(admin, group: str) -> int:
        raise GroupLoadInProgressError("describing consumer group")

    async with ConsumerLag(kafka.settings, group, [topic], interval_s=60, members=True) as lag:
        assert await lag.refresh() == {(topic, 0): 5}
        assert lag.members == 0  # nobody runs
        monkeypatch.setattr(consumer_lag, "group_members", loading)
        assert await lag.refresh() == {(topic, 0): 5}
        assert lag.lags == {(topic, 0): 5} and lag.members is None


async def test_the_first_refresh_after_failures_is_logged_once(kafka, caplog) -> None:
    """While Kafka cannot be reached each failure is logged; the refresh that works again
    says so once, so the log tells when the exported figures are fresh again."""
    import dataclasses
    import logging
    import socket

    topic = await kafka.create_topic("lag-back", partitions=1)
    group = kafka.unique("group")
    await _produce(kafka.bootstrap, topic, {0: 4})
    broker_host, broker_port = kafka.bootstrap.split(",")[0].rsplit(":", 1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        front = s.getsockname()[1]  # nothing listens there until the forwarder starts

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(broker_host, int(broker_port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if done():
                break
            await asyncio.sleep(0.05)

    caplog.set_level(logging.INFO, logger="dprobe.sinks.consumer_lag")
    settings = dataclasses.replace(kafka.settings, bootstrap=f"127.0.0.1:{front}")
    lag = ConsumerLag(settings, group, [topic], interval_s=0.1)
    server: asyncio.Server | None = None
    await lag.start()
    try:
        await until(lambda: lag.errors >= 2)
        failed = lag.errors
        assert failed >= 2 and lag.updated_at is None
        server = await asyncio.start_server(forward, "127.0.0.1", front)  # Kafka is back
        await until(lambda: lag.updated_at is not None)
        assert lag.lags == {(topic, 0): 4}
        first = lag.updated_at
        await until(lambda: lag.updated_at != first)  # and it goes on refreshing
        assert lag.updated_at != first
        again = [r for r in caplog.records if "refreshed again" in r.getMessage()]
        assert [(r.levelno, r.getMessage()) for r in again] == [
            (
                logging.INFO,
                f"consumer lag of group {group}: refreshed again after {lag.errors} failed "
                "refresh(es)",
            )
        ]
        assert lag.errors >= failed
    finally:
        await lag.stop()
        if server is not None:
            server.close()
