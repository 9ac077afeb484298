"""Scaling events through a transactional producer, on the real broker: the worker that
takes planning over fences every earlier owner (nothing more it sends lands), each
record's events commit together, and a worker that gets planning back sends again."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from dprobe.schema import decode_scaling_event
from dprobe.streams.event_fence import FencedEvents
from dprobe.streams.planning import DeliveryFailed, Planning
from tests.streams.helpers import consume
from tests.streams.test_batch_semantics import FakeTable
from tests.streams.test_planning_journal import _planning, _records

pytestmark = pytest.mark.integration
HALF = len(_records()) // 2  # where planning changes hands


def _sinks(kafka: object, topic: str, n: int) -> list[FencedEvents]:
    """``n`` workers' event sinks sharing one planning ``transactional.id``."""
    tid = kafka.unique("planning")  # type: ignore[attr-defined]

    def producer() -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=kafka.bootstrap,  # type: ignore[attr-defined]
            transactional_id=tid,
            enable_idempotence=True,
            acks="all",
        )

    return [FencedEvents(producer, topic) for _ in range(n)]


async def test_the_new_owner_fences_the_old_one_and_a_returning_owner_sends_again(
    kafka,
) -> None:
    topic = await kafka.create_topic("scaling-events", partitions=2)
    old, new = _sinks(kafka, topic, 2)
    try:
        await old.send_all([(b"vc-a", b"e1"), (b"vc-b", b"e2")])
        await new.claim()  # planning moved: the new owner's producer starts
        with pytest.raises(KafkaError):  # the old owner wakes up and tries to send
            await old.send_all([(b"vc-a", b"zombie-1"), (b"vc-b", b"zombie-2")])
        await new.send_all([(b"vc-b", b"e3")])
        old.release()  # later, planning comes back to the first worker
        await old.send_all([(b"vc-a", b"e4")])
        with pytest.raises(KafkaError):
            await new.send_all([(b"vc-a", b"zombie-3")])
    finally:
        for sink in (old, new):
            await sink.close()
    committed = await consume(
        kafka.bootstrap, topic, until=4, timeout_s=30, isolation_level="read_committed"
    )
    assert sorted(committed) == [b"e1", b"e2", b"e3", b"e4"]
    everything = await consume(kafka.bootstrap, topic, until=10**9, timeout_s=5)
    # a fenced producer's records never reach the log, even for uncommitted readers
    assert not [v for v in everything if v.startswith(b"zombie")], everything


@contextlib.asynccontextmanager
async def _two_owners(kafka: object, topic: str) -> AsyncIterator[tuple[Planning, Planning]]:
    """Two planning stages (two workers) whose events share planning's transactional id;
    the first has planned the first half of the journal tests' records."""
    sinks = _sinks(kafka, topic, 2)
    first, second = (_planning(FakeTable(), sink) for sink in sinks)  # type: ignore[arg-type]
    try:
        await _feed(first, 0, HALF)
        yield first, second
    finally:
        for sink in sinks:
            await sink.close()


async def _feed(planning: Planning, start: int, end: int | None) -> None:
    """Planning records ``start:end`` of the journal tests' records, at their offsets."""
    records = _records()
    for offset in range(start, len(records) if end is None else end):
        await planning.on_message(records[offset], offset)


def _sent(planning: Planning) -> int:
    return sum(planning.stats.scaling_events.values())


async def test_a_former_planning_owner_cannot_send_once_another_took_over(kafka) -> None:
    # Two planning stages read the same planning records; the second takes planning over
    # after the first planned a while. From then on the first's next plan fails to
    # deliver (the worker would exit unacknowledged), and the topic holds only the
    # events of the first up to the handover and of the second after it, once each
    # when read committed.
    topic = await kafka.create_topic("scaling-events", partitions=2)
    async with _two_owners(kafka, topic) as (first, second):
        sent_by_first = _sent(first)
        assert sent_by_first > 0
        await _feed(second, 0, None)  # the new owner plans from the start
        with pytest.raises(DeliveryFailed):  # the old owner goes on where it was
            await _feed(first, HALF, None)
        assert _sent(first) == sent_by_first
    sent = _sent(second)
    committed = await consume(
        kafka.bootstrap, topic, until=sent_by_first + sent, timeout_s=30,
        isolation_level="read_committed",
    )  # fmt: skip
    ids = [decode_scaling_event(v).event_id for v in committed]
    assert len(ids) == sent_by_first + sent
    # the new owner re-planned the first half from the same records: same events
    assert len(set(ids)) == sent


async def test_without_transactions_events_are_sent_one_by_one(kafka) -> None:
    # fence_events = false: for brokers that offer no transactions
    topic = await kafka.create_topic("scaling-events", partitions=2)
    sink = FencedEvents(
        lambda: AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all"),
        topic,
        transactional=False,
    )
    try:
        await sink.send_all([(b"vc-a", b"e1"), (b"vc-b", b"e2")])
        await sink.send_all([])
        await sink.send_all([(b"vc-a", b"e3")])
    finally:
        await sink.close()
    got = await consume(kafka.bootstrap, topic, until=3, timeout_s=30)
    assert sorted(got) == [b"e1", b"e2", b"e3"]


async def test_a_stalled_owner_that_gets_planning_back_sends_again(kafka) -> None:
    # The first owner stalls; the group gives planning to the second, which plans (and
    # fences the first); the first wakes up in a rebalance that gives planning back to it
    # (it sees a revoke, then planning assigned again). Its next plans are delivered,
    # through a new producer, not refused as a fenced owner's.
    topic = await kafka.create_topic("scaling-events", partitions=2)
    async with _two_owners(kafka, topic) as (first, second):
        await _feed(second, 0, HALF)
        before = _sent(first)
        first.revoke()  # the rebalance the first one sees when it wakes up
        await _feed(first, HALF, None)
        assert _sent(first) > before
