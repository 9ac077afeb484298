"""The Kafka side of a replay: one idempotent producer (``acks=all``) and the topics.

Example:
    >>> from dprobe.config import ReplaySettings
    >>> topics_for(ReplaySettings(), ["samples=my.samples"])
    {'samples': 'my.samples', 'jobs': 'dprobe-replay.jobs', 'cluster': 'dprobe-replay.cluster'}
    >>> topics_for(ReplaySettings(), ["other.jobs"], primary="jobs")["jobs"]
    'other.jobs'
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence, Set
from typing import Any

from dprobe.clock import Clock
from dprobe.config import ReplaySettings, check_topic_name
from dprobe.errors import UsageError
from dprobe.kafka_auth import start_client
from dprobe.traces.replay import ReplayStats, replay
from dprobe.traces.replay_record import ReplayRecord

KINDS = ("samples", "jobs", "cluster")
# How long a stopped replay's producer may take to close: what was sent has been awaited
# (or the wait for it was given up by a second interrupt, Kafka being gone)
STOP_WAIT_S = 5.0


def topics_for(
    settings: ReplaySettings, overrides: Sequence[str] = (), *, primary: str = "samples"
) -> dict[str, str]:
    """Topic per kind: ``dprobe-replay.samples``, ``.jobs``, ``.cluster`` (with the replay's
    ``topic_prefix``), changed by ``KIND=TOPIC`` items, or a bare ``TOPIC`` for the
    ``primary`` kind."""
    topics = {k: settings.topic(k) for k in KINDS}
    given: dict[str, str] = {}
    for item in overrides:
        kind, sep, topic = item.rpartition("=")
        kind = kind if sep else primary
        if kind not in KINDS or not topic:
            raise UsageError(
                f"--topic {item!r}: expected TOPIC or KIND=TOPIC (KIND: samples, jobs, cluster)"
            )
        if kind in given:
            raise UsageError(f"--topic {item!r}: the {kind} topic is already {given[kind]!r}")
        check_topic_name("--topic", topic)
        topics[kind] = given[kind] = topic
    shared = sorted(k for k in KINDS if list(topics.values()).count(topics[k]) > 1)
    if shared:  # a topic holds one kind of message: the others would be dead letters
        raise UsageError(
            f"--topic: {' and '.join(shared)} would go to one topic {topics[shared[0]]!r}; "
            "each kind needs a topic of its own"
        )
    return topics


def producer_config(settings: ReplaySettings) -> dict[str, Any]:
    """Keyword arguments of the replay producer: idempotent, acks=all, batched."""
    return {
        **settings.kafka.client_kwargs(),
        "acks": "all",
        "enable_idempotence": True,
        "compression_type": None if settings.compression == "none" else settings.compression,
        "linger_ms": 20,
        "max_batch_size": 1024 * 1024,
        "max_request_size": 4 * 1024 * 1024,
    }


async def replay_to_kafka(
    records: Iterable[ReplayRecord],
    settings: ReplaySettings,
    topics: dict[str, str],
    *,
    shift_to_now: bool = False,
    span_s: float = 0.0,
    clock: Clock | None = None,
    on_record: Callable[[ReplayRecord], None] | None = None,
    on_existing: Callable[[list[str]], None] | None = None,
    on_delivered: Callable[[int], None] | None = None,
) -> ReplayStats:
    """Replay ``records`` into Kafka; every record is delivered when this returns.
    ``on_existing`` is told, before the first record, which topics already hold records
    (an empty one, such as a worker waiting for the replay creates, is not named);
    ``on_delivered``, how many records Kafka has confirmed (:func:`replay`)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    wanted = sorted(set(topics.values()))
    missing = await ensure_topics(
        settings, wanted, compacted={topics["cluster"]}, samples=topics["samples"]
    )
    existing = [t for t in wanted if t not in missing]
    if on_existing is not None and existing:
        on_existing(await holding_records(settings, existing))
    producer = AIOKafkaProducer(**producer_config(settings))
    await start_client(producer.start, producer.stop, settings.kafka, KafkaConnectionError)
    stopped = False
    try:
        stats = await replay(
            records,
            producer,
            topics,
            speed=settings.speed,
            clock=clock,
            shift_to_now=shift_to_now,
            span_s=span_s,
            await_every=settings.await_every,
            on_record=on_record,
            on_delivered=on_delivered,
        )
        await producer.flush()
        return stats
    except asyncio.CancelledError:  # SIGTERM: the close must not wait for Kafka again
        stopped = True
        raise
    finally:
        if stopped:
            await asyncio.wait([asyncio.ensure_future(producer.stop())], timeout=STOP_WAIT_S)
        else:
            await producer.stop()


async def ensure_topics(
    settings: ReplaySettings,
    topics: Sequence[str],
    *,
    compacted: Set[str] = frozenset(),
    samples: str = "",
) -> list[str]:
    """Create the ``topics`` that do not exist yet (``settings.partitions`` each; those in
    ``compacted`` with one partition and compaction: cluster reports; ``samples`` with the
    broker's time as record time, as the worker creates it); return them."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaConnectionError

    from dprobe import topic_configs
    from dprobe.topic_create import create_topics

    admin = AIOKafkaAdminClient(**settings.kafka.client_kwargs())
    await start_client(admin.start, admin.close, settings.kafka, KafkaConnectionError)
    try:
        missing = [t for t in topics if t not in set(await admin.list_topics())]
        if missing:
            new = [
                NewTopic(
                    t, 1, settings.replication_factor, topic_configs={"cleanup.policy": "compact"}
                )
                if t in compacted
                else NewTopic(
                    t,
                    settings.partitions,
                    settings.replication_factor,
                    topic_configs=dict(topic_configs.SAMPLES) if t == samples else {},
                )
                for t in missing
            ]
            await create_topics(admin, new)  # one that exists: another client was faster
        return missing
    finally:
        await admin.close()


async def holding_records(settings: ReplaySettings, topics: Sequence[str]) -> list[str]:
    """The ``topics`` (which exist) that hold a record, or held one that retention or
    compaction has deleted since: a partition whose end offset is past 0."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaConnectionError

    admin = AIOKafkaAdminClient(**settings.kafka.client_kwargs())
    await start_client(admin.start, admin.close, settings.kafka, KafkaConnectionError)
    try:
        described = await admin.describe_topics(list(topics))
    finally:
        await admin.close()
    tps = [TopicPartition(d["topic"], p["partition"]) for d in described for p in d["partitions"]]
    if not tps:
        return []
    consumer = AIOKafkaConsumer(
        **settings.kafka.client_kwargs(), group_id=None, enable_auto_commit=False
    )
    await start_client(consumer.start, consumer.stop, settings.kafka, KafkaConnectionError)
    try:
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    used = {tp.topic for tp, end in ends.items() if end > 0}
    return [t for t in topics if t in used]
