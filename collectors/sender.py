"""Drain the spool into Kafka with one long-lived, idempotent producer.

The sender reads undelivered records from the spool in order, sends a batch (``acks=all``,
idempotent, compressed, key = host so a host's snapshots stay in one partition and in
order), awaits the delivery of the whole batch, then acks it in the spool. When Kafka is
unreachable or too slow it backs off (0.5 s doubling to 5 s) and tries the same records
again, so the spool absorbs any outage and everything is sent in order before newer data.
After a failed delivery the producer is replaced by a fresh one: retrying a batch may
write a snapshot twice (consumers drop duplicates by (host, seq)), but never leaves a gap.
A snapshot Kafka refuses for good (larger than the topic's ``max.message.bytes``) is
dropped, logged and counted in ``dropped_snapshots_total{reason="too_large"}``, and the
snapshots after it are delivered: it never holds up the spool.

Example:
    >>> from dprobe.config import KafkaSettings
    >>> sender = KafkaSender(KafkaSettings(), "dprobe.samples", key=b"h1", spool=spool,
    ...                      metrics=metrics)  # doctest: +SKIP
    >>> await sender.start(); sender.notify(); await sender.stop(timeout_s=10)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.codec import has_gzip, has_lz4, has_snappy, has_zstd
from aiokafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RequestTimedOutError,
)

from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.spool import Spool
from dprobe.collectors.topic_create import NewTopicSpec, TopicNotCreatedYet, ensure_topic
from dprobe.config import KafkaSettings
from dprobe.count_text import count_of
from dprobe.errors import UsageError, reason
from dprobe.kafka_auth import auth_refused, watching_auth
from dprobe.lifecycle import cancel_and_wait

log = logging.getLogger(__name__)

ProducerFactory = Callable[[], Any]
# Kafka refuses such a record whatever the retry: larger than the topic's max.message.bytes
# (or the producer's max_request_size)
TOO_LARGE = (MessageSizeTooLargeError, RecordListTooLargeError)
_CODECS: dict[str, Callable[[], bool]] = {
    "zstd": has_zstd,
    "lz4": has_lz4,
    "gzip": has_gzip,
    "snappy": has_snappy,
}


class KafkaSender:
    """Background task that moves spooled snapshots to ``topic``.

    Args:
        kafka: client settings (bootstrap, SASL/SSL) passed to the producer.
        topic: destination topic.
        key: message key (the host id, UTF-8).
        spool: where the snapshots wait.
        metrics: the collector's metrics.
        compression: ``zstd``, ``lz4``, ``gzip``, ``snappy`` or ``none``.
        batch_max: most records per awaited batch.
        send_timeout_s: a batch not confirmed in this time counts as failed.
        producer_factory: builds the producer (tests inject failures here).
        create: how to create ``topic`` if it is missing when the sender first connects
            (:mod:`dprobe.collectors.topic_create`); ``None``: never create it. While it is
            missing and cannot be created yet (Kafka hangs, no controller yet), nothing is
            sent and the connect is retried with backoff.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        *,
        key: bytes,
        spool: Spool,
        metrics: CollectorMetrics,
        compression: str = "zstd",
        batch_max: int = 500,
        send_timeout_s: float = 15.0,
        producer_factory: ProducerFactory | None = None,
        create: NewTopicSpec | None = None,
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.key = key
        self.spool = spool
        self.metrics = metrics
        self.compression = None if compression == "none" else compression
        self.batch_max = batch_max
        self.send_timeout_s = send_timeout_s
        self._factory = producer_factory or self._default_producer
        self._create = create  # done (set to None) once the topic was checked
        self._producer: Any = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0
        self._too_large: set[int] = set()  # seqs Kafka refused for good, not acked yet
        self._suspects: set[int] = set()  # seqs of a batch refused as too large: sent alone
        self._down_since: float | None = None
        self._stopped = False
        self._closing = False  # the loop ends at its next turn (stop() after its flush)

    def producer_config(self) -> dict[str, Any]:
        """Keyword arguments of the producer: the shared client settings (bootstrap,
        SASL/SSL) plus idempotence, ``acks=all`` and compression."""
        return {
            **self.kafka.client_kwargs(),
            "acks": "all",
            "enable_idempotence": True,
            "compression_type": self.compression,
            "linger_ms": 0,
            "max_request_size": 4 * 1024 * 1024,
        }

    def _default_producer(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(**self.producer_config())

    # lifecycle
    async def start(self) -> None:
        """Start the background task (it connects on its own, retrying with backoff).

        Raises :class:`UsageError` when the compression codec's library is missing."""
        if self.compression and not _CODECS[self.compression]():
            raise UsageError(
                f"compression {self.compression} needs its library: "
                f"pip install 'aiokafka[{self.compression}]'"
            )
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="dprobe-collector-sender")

    def notify(self) -> None:
        """Tell the sender that the spool has new records."""
        self._wake.set()

    @property
    def failed(self) -> BaseException | None:
        """The unexpected error that ended the background task, if any."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            return self._task.exception()
        return None

    async def flush(self, timeout_s: float) -> bool:
        """Wait until the spool is empty; give up after ``timeout_s`` or at the first
        failed connect or delivery (the rest stays spooled). True when empty."""
        failures = self._failures
        deadline = time.monotonic() + timeout_s
        while self.spool.pending_records and time.monotonic() < deadline:
            if self._task is None or self._task.done() or self._failures > failures:
                break
            self._wake.set()
            await asyncio.sleep(0.02)
        return self.spool.pending_records == 0

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Flush for up to ``timeout_s``, then stop (idempotent). Unsent records stay
        spooled and are sent first by the next run."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if self._task is not None and not self._task.done():
                if not await self.flush(timeout_s):
                    log.warning(
                        "%s left in the spool for the next run",
                        count_of(self.spool.pending_records, "snapshot"),
                    )
                self._closing = True  # a lost cancellation still ends the loop
                await cancel_and_wait(self._task)
        finally:
            await self._close_producer()

    # the loop
    async def _run(self) -> None:
        backoff = 0.5
        try:
            while not self._closing:
                if self._producer is None and not await self._connect():
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                batch = self.spool.read(max_records=self.batch_max)
                if not batch:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), 1.0)
                    continue
                if await self._send(batch):
                    refused = sum(r.seq in self._too_large for r in batch)
                    self._too_large.difference_update(r.seq for r in batch)
                    self._suspects.difference_update(r.seq for r in batch)
                    self.spool.ack(batch[-1].end, len(batch))
                    self.metrics.sent.inc(len(batch) - refused)
                    if refused:
                        self.metrics.dropped.labels(reason="too_large").inc(refused)
                    backoff = 0.5
                else:
                    await self._close_producer()
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("collector sender failed")
            raise RuntimeError("collector sender failed") from exc

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def _connect(self) -> bool:
        producer = self._factory()
        try:
            return await self._start_producer(producer)
        except asyncio.CancelledError:  # stopped while connecting: close what was opened
            if self._producer is not producer:
                await asyncio.shield(self._stop_producer(producer))
            raise

    async def _start_producer(self, producer: Any) -> bool:
        with watching_auth() as watch:
            try:
                await asyncio.wait_for(producer.start(), self.send_timeout_s)
            except (KafkaError, OSError, TimeoutError) as exc:
                self._failures += 1
                refused = watch.failure is not None
                self.metrics.send_errors.labels(kind="auth" if refused else "connect").inc()
                self.metrics.kafka_up.set(0)
                self.metrics.kafka_auth_failed.set(1 if refused else 0)
                if refused:
                    self._log_failure("%s: spooling", auth_refused(self.kafka))
                else:
                    waited = f"no answer within {self.send_timeout_s:g} s"
                    self._log_failure(
                        "Kafka at %s not reachable (%s): spooling",
                        self.kafka.bootstrap,
                        waited if type(exc) is TimeoutError else reason(exc),
                    )
                await self._stop_producer(producer)
                return False
        self.metrics.kafka_auth_failed.set(0)
        if self._create is not None:  # before the first record could auto-create it
            try:
                await ensure_topic(
                    self.kafka, self.topic, self._create, timeout_s=self.send_timeout_s
                )
            except TopicNotCreatedYet as exc:  # nothing is sent until it exists
                self._failures += 1
                self.metrics.send_errors.labels(kind="connect").inc()
                self.metrics.kafka_up.set(0)
                self._log_failure(
                    "topic %s is missing and could not be created yet (%s): spooling, will retry"
                    if exc.missing
                    else "could not learn whether topic %s exists, to create it if missing "
                    "(%s): spooling, will retry",
                    self.topic,
                    exc,
                )
                await self._stop_producer(producer)
                return False
            self._create = None
        self._producer = producer
        log.info("connected to Kafka at %s", self.kafka.bootstrap)
        self._down_since = None
        return True

    async def _send(self, batch: list[Any]) -> bool:
        """Deliver ``batch``; True when Kafka confirmed every record of it but those it
        refuses for good (noted in ``_too_large``, skipped when the batch is tried again).

        Kafka refuses a size batch by batch, so records of a batch it refused as too large
        are suspects: on the next try each is sent alone, and only one refused alone is
        refused for good."""
        t0 = time.perf_counter()
        producer = self._producer
        try:
            async with asyncio.timeout(self.send_timeout_s):
                sent: list[tuple[Any, Any]] = []
                for r in batch:
                    if r.seq in self._too_large:
                        continue
                    alone = r.seq in self._suspects
                    if alone:  # nothing else in flight: its batch holds it only
                        await self._settle(sent)
                        sent = []
                    try:
                        fut = await producer.send(self.topic, value=r.payload, key=self.key)
                    except TOO_LARGE as exc:  # over the producer's own limit, alone
                        self._refused(r, exc)
                        continue
                    sent.append((r, fut))
                    if alone:
                        await self._settle(sent)
                        sent = []
                await self._settle(sent)
        except (KafkaError, OSError, TimeoutError) as exc:
            timed_out = isinstance(exc, TimeoutError | KafkaTimeoutError | RequestTimedOutError)
            kind = "timeout" if timed_out else type(exc).__name__
            self._failures += 1
            self.metrics.send_errors.labels(kind=kind).inc()
            self.metrics.kafka_up.set(0)
            self._log_failure("delivery of %d snapshots failed (%s): retrying", len(batch), kind)
            return False
        self.metrics.send_latency.observe(time.perf_counter() - t0)
        self.metrics.kafka_up.set(1)
        return True

    async def _settle(self, sent: list[tuple[Any, Any]]) -> None:
        """Await the deliveries of ``sent``; raise the first failure. Records refused as
        too large become suspects (a failure too), or refused for good when alone."""
        outcomes = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
        failed: BaseException | None = None
        for (r, _), outcome in zip(sent, outcomes, strict=True):
            if isinstance(outcome, TOO_LARGE) and len(sent) == 1:
                self._refused(r, outcome)
            elif isinstance(outcome, BaseException):
                if isinstance(outcome, TOO_LARGE):
                    self._suspects.add(r.seq)
                failed = failed or outcome
        if failed is not None:
            raise failed

    def _refused(self, record: Any, exc: BaseException) -> None:
        """Note a record Kafka refuses for good: it is dropped when its batch is acked."""
        self._suspects.discard(record.seq)
        if record.seq not in self._too_large:
            self._too_large.add(record.seq)
            log.error(
                "snapshot seq %d (%d bytes) dropped: Kafka refuses it for topic %s (%s); raise "
                "the topic's max.message.bytes to take snapshots of this size",
                record.seq, len(record.payload), self.topic, type(exc).__name__,
            )  # fmt: skip

    def _log_failure(self, msg: str, *args: object) -> None:
        """Warn when Kafka goes away and once a minute while it stays away; else debug."""
        now = time.monotonic()
        if self._down_since is None or now - self._down_since >= 60.0:
            self._down_since = now
            spooled = count_of(self.spool.pending_records, "snapshot")
            log.warning(msg + " (%s spooled)", *args, spooled)
        else:
            log.debug(msg, *args)

    async def _close_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await self._stop_producer(producer)

    async def _stop_producer(self, producer: Any) -> None:
        await _give_up_unsent(producer)
        try:
            await asyncio.wait_for(producer.stop(), 5.0)
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning("Kafka producer did not stop cleanly: %s", reason(exc))


async def _give_up_unsent(producer: Any) -> None:
    """Make an aiokafka producer drop the batches it still holds, so ``stop()`` closes it.

    ``stop()`` first waits until every batch the producer holds is delivered, and an
    idempotent producer retries them for ever while Kafka is away: a producer replaced
    after a failed delivery would keep its connections and tasks for the life of the
    process, one more after each failure. Those batches are all still in the spool (it
    is acked only after a confirmed delivery), and the next producer sends them. So the
    producer's delivery loop is stopped, then its batches are forgotten (not failed: no
    one waits for them any more). This reaches into aiokafka's internals (checked by
    ``tests/collectors/test_outage_integration.py``); where they differ, the producer
    is stopped as before.
    """
    sender = getattr(producer, "_sender", None)
    accumulator = getattr(producer, "_message_accumulator", None)
    if sender is None or accumulator is None:
        return
    try:
        await asyncio.wait_for(sender.close(), 5.0)
    except (KafkaError, OSError, TimeoutError) as exc:
        log.warning(
            "Kafka did not answer the producer being replaced within 5 s (%s): closing it",
            reason(exc),
        )
    for held in ("_batches", "_pending_batches"):
        batches = getattr(accumulator, held, None)
        if batches is not None:
            batches.clear()
