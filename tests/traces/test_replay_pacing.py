"""Replay pacing and delivery with an injected clock (no real sleeping)."""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError

from dprobe import schema
from dprobe.clock import ManualClock
from dprobe.errors import UsageError
from dprobe.traces.replay import MemorySink, ReplayError, replay
from dprobe.traces.replay_record import ReplayRecord

TOPICS = {"samples": "s", "jobs": "j"}


def _jobs(times: list[float]) -> list[ReplayRecord]:
    return [
        ReplayRecord.of(schema.JobEvent(ts=t, event="submit", job=f"j{i}", tenant="a", gpus=1))
        for i, t in enumerate(times)
    ]


@pytest.mark.parametrize(
    ("speed", "expected"),
    [
        (1.0, [0.0, 30.0, 60.0, 600.0]),
        (60.0, [0.0, 0.5, 1.0, 10.0]),
        (600.0, [0.0, 0.05, 0.1, 1.0]),
    ],
)
async def test_records_sent_at_event_time_over_speed(speed: float, expected: list[float]) -> None:
    clock = ManualClock(monotonic_start=100.0)
    sink = MemorySink(clock)
    base = 1_590_000_000.0
    stats = await replay(
        _jobs([base, base + 30, base + 60, base + 600]), sink, TOPICS, speed=speed, clock=clock
    )
    sent_at = [t - 100.0 for t, *_ in sink.sent]
    assert sent_at == pytest.approx(expected)
    assert stats.records == 4 and stats.by_kind == {"jobs": 4}
    assert stats.wall_s == pytest.approx(expected[-1])


async def test_speed_zero_never_sleeps_and_keeps_order() -> None:
    clock = ManualClock()
    sink = MemorySink(clock)
    times = [0.0, 5.0, 5.0, 3600.0 * 24]
    await replay(_jobs(times), sink, TOPICS, speed=0.0, clock=clock)
    assert clock.slept == []
    assert [schema.decode_job_event(v).job for *_, v in sink.sent] == ["j0", "j1", "j2", "j3"]


async def test_schedule_does_not_drift_when_sends_are_slow() -> None:
    clock = ManualClock()

    class SlowSink(MemorySink):
        async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Awaitable[Any]:
            fut = await super().send(topic, value, key)
            clock.advance(0.3)  # each send costs 0.3 s of wall time
            return fut

    sink = SlowSink(clock)
    await replay(_jobs([0.0, 60.0, 120.0, 180.0]), sink, TOPICS, speed=60.0, clock=clock)
    assert [t for t, *_ in sink.sent] == pytest.approx([0.0, 1.0, 2.0, 3.0])


async def test_kinds_go_to_their_topics_with_keys() -> None:
    snap = schema.HostSnapshot(host="h1", ts=1.0, interval_s=1.0, seq=0)
    recs = [ReplayRecord.of(snap), *_jobs([2.0])]
    sink = MemorySink()
    await replay(recs, sink, TOPICS)
    assert [(topic, key) for _, topic, key, _ in sink.sent] == [("s", b"h1"), ("j", b"j0")]


async def test_shift_to_now_moves_every_event_time_by_the_same_amount() -> None:
    clock = ManualClock(start=1_800_000_000.0)
    sink = MemorySink(clock)
    stats = await replay(_jobs([1000.0, 1060.0]), sink, TOPICS, clock=clock, shift_to_now=True)
    got = [schema.decode_job_event(v).ts for *_, v in sink.sent]
    assert got == [1_800_000_000.0, 1_800_000_060.0]
    assert stats.first_ts == 1_800_000_000.0


@pytest.mark.parametrize("speed", [1.0, 60.0, 600.0, 0.0])
async def test_a_shifted_replay_never_stamps_a_record_after_the_time_it_is_sent(
    speed: float,
) -> None:
    """Faster than real time, event time would run ahead of the clock (and a worker takes
    snapshots from the future for a wrong clock): the shift puts the first record in the
    past so that the last one is stamped about when it is sent."""
    times = [1000.0 + 60.0 * i for i in range(61)]  # one hour
    clock = ManualClock(start=1_800_000_000.0, monotonic_start=0.0)
    sink = MemorySink(clock)
    await replay(
        _jobs(times), sink, TOPICS, speed=speed, clock=clock, shift_to_now=True, span_s=3600.0
    )
    stamped = [schema.decode_job_event(v).ts for *_, v in sink.sent]
    sent_at = [1_800_000_000.0 + mono for mono, *_ in sink.sent]  # wall time when sent
    assert all(ts <= at + 1e-6 for ts, at in zip(stamped, sent_at, strict=True))
    assert stamped[-1] == pytest.approx(sent_at[-1], abs=1e-6)
    gaps = [b - a for a, b in itertools.pairwise(stamped)]
    assert gaps == pytest.approx([60.0] * 60)  # every event time moved by the same amount
    if speed == 1.0:
        assert stamped[0] == 1_800_000_000.0  # at real time the first record is now


async def test_delivery_failure_stops_the_replay() -> None:
    class FailingSink(MemorySink):
        async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Awaitable[Any]:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            fut.set_exception(RuntimeError("broker said no"))
            return fut

    with pytest.raises(ReplayError, match="broker said no"):
        await replay(_jobs([0.0, 1.0, 2.0]), FailingSink(), TOPICS, await_every=2)


class LateSink(MemorySink):
    """A producer that delivers (or fails) each record a moment after it is sent."""

    def __init__(self, error: Exception | None = None) -> None:
        super().__init__()
        self.error = error
        self.futures: list[asyncio.Future[None]] = []

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Awaitable[Any]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.error is None:
            asyncio.get_running_loop().call_later(0.05, fut.set_result, None)
        else:
            asyncio.get_running_loop().call_later(0.05, fut.set_exception, self.error)
        self.futures.append(fut)
        return fut


def _bad_after(records: list[ReplayRecord]) -> Iterator[ReplayRecord]:
    yield from records
    raise UsageError("trace.csv line 4: not a number")


async def test_an_input_error_waits_until_what_was_sent_is_delivered() -> None:
    sink = LateSink()
    with pytest.raises(UsageError, match="line 4"):
        await replay(_bad_after(_jobs([0.0, 1.0, 2.0])), sink, TOPICS)
    assert len(sink.futures) == 3 and all(f.done() for f in sink.futures)


async def test_an_input_error_says_when_what_was_sent_was_not_delivered() -> None:
    sink = LateSink(RuntimeError("broker said no"))
    with pytest.raises(ReplayError, match=r"broker said no.*3 of the last 3 records sent were not"):
        await replay(_bad_after(_jobs([0.0, 1.0, 2.0])), sink, TOPICS)


async def test_a_record_without_a_topic_is_an_error() -> None:
    with pytest.raises(ReplayError, match="no topic for jobs"):
        await replay(_jobs([0.0]), MemorySink(), {"samples": "s"})


async def test_an_interrupt_while_awaiting_delivery_leaves_what_was_sent_to_be_delivered() -> None:
    # Ctrl-C or SIGTERM (a cancelled replay) during one of the periodic waits for delivery
    # must not cancel the deliveries themselves: the replay waits for them and stops as
    # interrupted, not with a delivery failure
    sink = LateSink()
    task = asyncio.create_task(replay(_jobs([0.0, 1.0, 2.0, 3.0]), sink, TOPICS, await_every=2))
    await asyncio.sleep(0.01)  # the first two are sent, their delivery is awaited
    assert len(sink.futures) == 2 and not any(f.done() for f in sink.futures)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(f.done() and not f.cancelled() for f in sink.futures)


async def test_an_interrupt_during_the_last_wait_for_delivery_still_waits_for_it() -> None:
    # the wait for the last records after the loop is a wait like the periodic ones: a
    # first Ctrl-C there waits for what was sent and says how much Kafka confirmed
    sink = LateSink()
    told: list[int] = []
    work = replay(_jobs([0.0, 1.0, 2.0]), sink, TOPICS, on_delivered=told.append)
    task = asyncio.create_task(work)
    await asyncio.sleep(0.01)  # all three sent, their delivery awaited at the end
    assert len(sink.futures) == 3 and not any(f.done() for f in sink.futures)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(f.done() and not f.cancelled() for f in sink.futures)
    assert told == [3]


async def test_a_failed_delivery_is_told_without_waiting_for_the_slowest() -> None:
    class OneFailsAtOnce(MemorySink):  # the first record fails, the others never answer
        def __init__(self) -> None:
            super().__init__()
            self.futures: list[asyncio.Future[None]] = []

        async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Any:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if not self.futures:
                fut.set_exception(KafkaTimeoutError())
            self.futures.append(fut)
            return fut

    with pytest.raises(ReplayError, match="delivery failed"):
        await asyncio.wait_for(replay(_jobs([0.0, 1.0, 2.0]), OneFailsAtOnce(), TOPICS), 5)


async def test_a_replay_stopped_while_kafka_is_gone_does_not_hang_closing_its_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # SIGTERM cancels the replay; a second one ends the wait for the last deliveries.
    # Closing the producer must not then wait for them again, forever, while Kafka is gone
    import aiokafka

    from dprobe.config import ReplaySettings
    from dprobe.traces import replay_kafka

    class GoneProducer:  # takes records, never delivers them, and never closes
        def __init__(self, **kw: Any) -> None:
            self.futures: list[asyncio.Future[None]] = []

        async def start(self) -> None: ...

        async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Any:
            self.futures.append(asyncio.get_running_loop().create_future())
            return self.futures[-1]

        async def stop(self) -> None:
            await asyncio.Event().wait()

    async def no_topics(*args: Any, **kw: Any) -> list[str]:
        return []

    monkeypatch.setattr(aiokafka, "AIOKafkaProducer", GoneProducer)
    monkeypatch.setattr(replay_kafka, "ensure_topics", no_topics)
    monkeypatch.setattr(replay_kafka, "STOP_WAIT_S", 0.2)
    topics = {"samples": "s", "jobs": "j", "cluster": "c"}
    work = replay_kafka.replay_to_kafka(_jobs([0.0, 10.0]), ReplaySettings(speed=1), topics)
    task = asyncio.create_task(work)
    await asyncio.sleep(0.05)
    task.cancel()  # SIGTERM: the replay waits for what it sent
    await asyncio.sleep(0.05)
    assert not task.done()
    task.cancel()  # SIGTERM again: it stops waiting
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2.0)


async def test_a_failed_delivery_leaves_no_error_of_the_other_records_unread() -> None:
    """Kafka gone: the first record fails, and every other one sent fails after it. The
    replay says so once; the failures of the others are not printed as hundreds of
    "Future exception was never retrieved" tracebacks when the replay ends."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    gc.collect()  # what earlier tests left
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx["message"]))
    sent: list[asyncio.Future[None]] = []

    class AllFail(MemorySink):
        async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Any:
            fut: asyncio.Future[None] = loop.create_future()
            if not sent:
                fut.set_exception(KafkaTimeoutError())
            sent.append(fut)
            return fut

    try:
        await replay(_jobs([0.0, 1.0, 2.0, 3.0]), AllFail(), TOPICS, await_every=4)
    except ReplayError as exc:  # not kept: its traceback would keep the records' futures
        said = str(exc)
    assert said.startswith("delivery failed")
    for fut in sent:
        if not fut.done():
            fut.set_exception(KafkaTimeoutError())
    sent.clear()
    await asyncio.sleep(0)
    gc.collect()
    assert reported == []
