"""Replay records into Kafka in event-time order at a speed factor.

``speed`` = event seconds per wall second: 1 is real time, 60 a minute per second, 0 as
fast as possible. Pacing keeps to a schedule (record at event time ``t`` is sent at
``start + (t - t0) / speed``), so slow sends do not add up. Event times are kept unless
``shift_to_now``: then every ``ts`` moves by the same amount so that the replay ends now,
its last record stamped with the time it is sent (:func:`shift_to_end_now`), and no
record is stamped after the time it is sent: a worker rejects snapshots from the future.
The producer is idempotent with ``acks=all``; delivery is awaited every ``await_every``
records, every second, and at the end, so a failure stops the replay with an error.
The clock (:mod:`dprobe.clock`) is injected: tests run pacing on a
:class:`~dprobe.clock.ManualClock` without sleeping.

Example:
    >>> import asyncio
    >>> from dprobe.schema import JobEvent
    >>> from dprobe.traces.replay_record import ReplayRecord
    >>> recs = [ReplayRecord.of(JobEvent(ts=t, event="submit", job=f"j{t}", tenant="a", gpus=1))
    ...         for t in (0.0, 60.0)]
    >>> from dprobe.clock import ManualClock
    >>> clock = ManualClock(); sink = MemorySink(clock)
    >>> stats = asyncio.run(replay(recs, sink, {"jobs": "dprobe.jobs"}, speed=60, clock=clock))
    >>> stats.records, [round(t, 3) for t, *_ in sink.sent]
    (2, [0.0, 1.0])
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dprobe.abandoned_futures import read_failures
from dprobe.clock import Clock, SystemClock
from dprobe.errors import DprobeError
from dprobe.traces.replay_record import ReplayRecord, shifted


class ReplayError(DprobeError):
    """A record could not be delivered (exit 1)."""


class Sink(Protocol):
    """Where records go: an ``AIOKafkaProducer`` or :class:`MemorySink`."""

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Awaitable[Any]: ...


class MemorySink:
    """Collects ``(clock time, topic, key, value)``; for tests and examples."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock
        self.sent: list[tuple[float, str, bytes | None, bytes]] = []

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Awaitable[Any]:
        now = self.clock.monotonic() if self.clock else 0.0
        self.sent.append((now, topic, key, value))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


@dataclass
class ReplayStats:
    """What a replay did."""

    records: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    first_ts: float | None = None
    last_ts: float | None = None
    wall_s: float = 0.0


class Pacer:
    """Sleeps until each event time is due at ``speed`` (0 = never sleeps)."""

    def __init__(self, speed: float, clock: Clock) -> None:
        if speed < 0:
            raise ValueError("speed must be >= 0")
        self.speed = speed
        self.clock = clock
        self._origin: tuple[float, float] | None = None

    async def wait(self, ts: float) -> None:
        if self.speed == 0:
            return
        if self._origin is None:
            self._origin = (ts, self.clock.monotonic())
            return
        t0, w0 = self._origin
        delay = w0 + (ts - t0) / self.speed - self.clock.monotonic()
        if delay > 0.0005:
            await self.clock.sleep(delay)


async def replay(
    records: Iterable[ReplayRecord],
    sink: Sink,
    topics: dict[str, str],
    *,
    speed: float = 0.0,
    clock: Clock | None = None,
    shift_to_now: bool = False,
    span_s: float = 0.0,
    await_every: int = 20_000,
    on_record: Callable[[ReplayRecord], None] | None = None,
    on_delivered: Callable[[int], None] | None = None,
) -> ReplayStats:
    """Send ``records`` (event-time ordered) to ``topics[record.kind]`` paced by ``speed``.

    ``span_s`` is the event time from the first record to the last (or more), which
    ``shift_to_now`` needs when the replay runs faster than real time. ``on_delivered``
    is told how many records Kafka has confirmed so far, each time that grows."""
    clk = clock or SystemClock()
    pacer = Pacer(speed, clk)
    stats = ReplayStats()
    pending: list[asyncio.Future[Any]] = []
    started = last_wait = clk.monotonic()
    delta: float | None = None
    try:
        for original in records:
            rec = original
            topic = _topic_of(rec, topics)
            if shift_to_now:
                if delta is None:
                    delta = shift_to_end_now(rec.ts, clk.now(), speed, span_s)
                rec = shifted(original, delta)
            await pacer.wait(rec.ts)
            try:
                sent = await sink.send(topic, value=rec.value, key=rec.key)
                pending.append(asyncio.ensure_future(sent))
            except Exception as exc:  # a Kafka error at send (no metadata, refused, too large)
                raise ReplayError(f"sending to {topic} failed: {exc!r}") from exc
            stats.records += 1
            stats.by_kind[rec.kind] = stats.by_kind.get(rec.kind, 0) + 1
            if stats.first_ts is None:
                stats.first_ts = rec.ts
            stats.last_ts = rec.ts
            if on_record is not None:
                on_record(rec)
            if len(pending) >= await_every or clk.monotonic() - last_wait >= 1.0:
                await _delivered(pending)
                pending = []
                last_wait = clk.monotonic()
                if on_delivered is not None:
                    on_delivered(stats.records)
        await _delivered(pending)  # the last ones: a Ctrl-C here waits for them too
    except ReplayError:
        read_failures(pending)  # the failures after the first: nobody awaits them
        raise
    except BaseException as stop:  # an input error, Ctrl-C: what was sent is delivered
        await _delivered_before(stop, pending)
        if on_delivered is not None:
            on_delivered(stats.records)
        raise
    if on_delivered is not None:
        on_delivered(stats.records)
    stats.wall_s = clk.monotonic() - started
    return stats


def shift_to_end_now(first_ts: float, now: float, speed: float, span_s: float) -> float:
    """What to add to every event time of a replay starting ``now`` at ``speed`` (0: as fast
    as possible) whose records span ``span_s`` seconds from ``first_ts``, so that none is
    stamped after the time it is sent and the last one about when it is sent. At real time
    or slower the first record is now; faster, it is as far in the past as the replay
    would otherwise run ahead of the clock.

    >>> shift_to_end_now(1000.0, 5000.0, speed=1, span_s=3600)  # first record now
    4000.0
    >>> 1000.0 + shift_to_end_now(1000.0, 5000.0, speed=600, span_s=6000)  # 10 s, ends now
    -990.0
    """
    ahead = span_s if speed <= 0 else span_s * max(0.0, 1.0 - 1.0 / speed)
    return now - first_ts - ahead


def _topic_of(rec: ReplayRecord, topics: dict[str, str]) -> str:
    try:
        return topics[rec.kind]
    except KeyError:
        raise ReplayError(f"no topic for {rec.kind} records") from None


async def _delivered_before(stop: BaseException, futures: list[asyncio.Future[Any]]) -> None:
    """Wait for the records sent before ``stop`` (an input error, an interrupt), so that
    what was sent is delivered; :class:`ReplayError` when some of them were not."""
    results = await asyncio.gather(*futures, return_exceptions=True)
    if failed := [r for r in results if isinstance(r, BaseException)]:
        raise ReplayError(
            f"delivery failed: {failed[0]!r} ({len(failed)} of the last {len(results)} "
            "records sent were not delivered)"
        ) from stop


async def _delivered(futures: list[asyncio.Future[Any]]) -> None:
    if not futures:
        return
    # asyncio.wait, not gather: an interrupt (Ctrl-C, SIGTERM) that cancels this wait
    # leaves the deliveries themselves pending, for _delivered_before to wait for; the
    # first failure ends the wait, without waiting for the slowest delivery
    done, _ = await asyncio.wait(futures, return_when=asyncio.FIRST_EXCEPTION)
    for fut in (f for f in futures if f in done):
        exc = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        if exc is not None:  # any Kafka error: the replay cannot go on
            raise ReplayError(f"delivery failed: {exc!r}") from exc
