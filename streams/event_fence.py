"""Scaling events through a transactional producer: one plan lands whole, and a former
planning owner can send nothing once another worker has taken planning over.

The planning stage sends its events through :class:`FencedEvents`. Its producer's
``transactional.id`` belongs to the worker group's planning (``<app_id>-planning``), so
the worker that takes planning over starts a producer with the same id, and Kafka bumps
the id's epoch: every earlier owner's producer is *fenced*, the broker refuses what it
sends from then on, and a transaction it had left open is aborted. A former owner whose
event loop stalled past the group's session timeout therefore cannot send one more event
when it wakes up: its next delivery fails and the worker exits unacknowledged (a
supervisor restarts it and it rejoins as any worker does).

The events of one planning record (every plan it completes) go in one transaction: a
consumer reading with ``isolation_level=read_committed`` sees all of a plan's events or
none, never half a plan from a worker that died in between (the next owner sends them
again, with the same ``event_id``).

Example (a stand-in for the producer; the real one is ``aiokafka.AIOKafkaProducer``):
    >>> import asyncio
    >>> class Producer:
    ...     def __init__(self): self.log = []
    ...     async def start(self): self.log.append("start: older owners fenced")
    ...     async def stop(self): self.log.append("stop")
    ...     async def begin_transaction(self): self.log.append("begin")
    ...     async def commit_transaction(self): self.log.append("commit")
    ...     async def abort_transaction(self): self.log.append("abort")
    ...     async def send(self, topic, value, key):  # returns the delivery's future
    ...         self.log.append(f"{topic} {key!r}")
    ...         return asyncio.sleep(0)
    >>> made = []
    >>> sink = FencedEvents(lambda: made.append(Producer()) or made[-1], "dprobe.scaling-events")
    >>> asyncio.run(sink.send_all([(b"vc-a", b"{}"), (b"vc-b", b"{}")]))
    >>> for line in made[0].log: print(line)
    start: older owners fenced
    begin
    dprobe.scaling-events b'vc-a'
    dprobe.scaling-events b'vc-b'
    commit
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from dprobe.abandoned_futures import read_failures

log = logging.getLogger(__name__)


def transactional_id(app_id: str) -> str:
    """The ``transactional.id`` of a worker group's planning: one owner at a time.

    >>> transactional_id("dprobe-worker")
    'dprobe-worker-planning'
    """
    return f"{app_id}-planning"


class FencedEvents:
    """Deliver each planning record's events in one transaction of a producer made by
    ``make_producer`` (started by :meth:`claim` or the first :meth:`send_all`). With
    ``transactional=False`` (a producer without ``transactional_id``, for brokers that
    offer no transactions) the records are sent and awaited one by one, unfenced."""

    def __init__(
        self, make_producer: Callable[[], Any], topic: str, *, transactional: bool = True
    ) -> None:
        self.make_producer = make_producer
        self.topic = topic
        self.transactional = transactional
        self._producer: Any = None
        # rebalances seen, now and when the producer began to start: a producer started
        # before the last rebalance is stale (planning may have gone elsewhere since)
        self._releases = 0
        self._started_at = 0
        self._lock = asyncio.Lock()  # one claim, transaction or stop at a time
        self._retiring: set[asyncio.Task[None]] = set()

    async def claim(self) -> None:
        """Hold planning's producer: start it (which fences every earlier owner), or
        start a new one after :meth:`release` (another owner may have fenced the old one
        since). A no-op while this worker's producer is current."""
        async with self._lock:
            await self._claim()

    async def _claim(self) -> None:
        if self._producer is not None and not self._stale():
            return
        await self._stop()
        started_at = self._releases
        producer = self.make_producer()
        await producer.start()
        self._producer, self._started_at = producer, started_at
        log.info("planning's event producer started; earlier owners are fenced")

    def release(self) -> None:
        """A rebalance began (planning may be another worker's now, or have been in
        between): the next :meth:`claim` starts a new producer, and the current one is
        stopped in the background once a transaction in flight has committed, so a
        worker that lost planning holds no idle producer (nor its connections)."""
        self._releases += 1
        producer = self._producer
        if producer is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop: the next claim or close stops it
            return
        task = loop.create_task(self._retire(producer))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def _stale(self) -> bool:
        return self._started_at != self._releases

    async def _retire(self, producer: Any) -> None:
        async with self._lock:
            if self._producer is producer and self._stale():
                await self._stop()

    async def send_all(self, records: Sequence[tuple[bytes, bytes]]) -> None:
        """Send ``(key, value)`` records in one transaction and wait until it commits.
        Raises when it does not (e.g. ``ProducerFenced``: another worker plans now)."""
        if not records:
            return
        async with self._lock:
            await self._claim()
            await self._send_all(self._producer, records)

    async def _send_all(self, producer: Any, records: Sequence[tuple[bytes, bytes]]) -> None:
        if not self.transactional:  # a broker without transactions: no fence, no atomicity
            futures = [await producer.send(self.topic, v, key=k) for k, v in records]
            for fut in futures:
                await fut
            return
        await producer.begin_transaction()
        futures = []
        try:
            for key, value in records:
                futures.append(await producer.send(self.topic, value, key=key))
            # aiokafka commits a transaction whose sends the broker refused (e.g. a
            # record above max.message.bytes) with what it took: half a plan. Every
            # send must have landed before the commit.
            for fut in futures:
                await fut
        except BaseException:
            read_failures(futures)  # the error raised is the one that stopped it
            await _abort(producer)
            raise
        try:
            await producer.commit_transaction()  # waits for every send of the transaction
        except BaseException:
            read_failures(futures)  # the commit's error is the one raised
            raise

    async def close(self) -> None:
        """Stop the producer (the worker is stopping)."""
        async with self._lock:
            await self._stop()
        for task in list(self._retiring):
            await task

    async def _stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await producer.stop()
            except Exception as exc:  # noqa: BLE001 - a fenced producer may fail to stop
                log.warning("stopping planning's old event producer: %r", exc)


async def _abort(producer: Any) -> None:
    try:
        await producer.abort_transaction()
    except Exception as exc:  # noqa: BLE001 - the original error is the one raised
        log.warning("aborting a planning transaction: %r", exc)
