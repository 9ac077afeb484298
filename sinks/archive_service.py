"""The archive service: ``dprobe.samples``, ``dprobe.jobs`` and ``dprobe.cluster`` into
hourly Parquet files.

One consumer of the group ``archive.group_id`` (manual commits) reads the three topics,
validates each record with the message contracts and buffers it in an
:class:`~dprobe.sinks.parquet_archive.ArchiveWriter`. Invalid records are counted and
not archived (the stream worker dead-letters them); their offsets are committed like the
others.

The topics are subscribed to by a pattern that names them exactly, so the archive never
creates one (a broker that creates topics on demand would make ``dprobe.cluster`` without
its compaction and single partition). A topic that does not exist yet is archived from its
first record once it appears, at the consumer's next metadata refresh (within 30 s);
``--until-end`` exports only the topics that exist when it starts, each partition up to
the end it had when the archive got it.

Commit order (the one place it is written down):

1. rows are buffered in memory; the next offset of every partition read is noted;
2. at a flush (``flush_records``/``flush_bytes`` buffered, ``flush_interval_s`` passed, a
   rebalance revoking partitions, or stop) every buffer is written to its file: temp
   file, fsync, atomic rename, fsync of the folder;
3. only then the noted offsets are committed to Kafka.

A crash before 3 leaves files whose offsets were never committed. When a partition is
assigned, files of it that start at or after its committed offset are deleted before
anything is read, and the records are read and written again; a file named by the same
offsets is simply overwritten. So every record is in exactly one file once committed.

Example:
    >>> from pathlib import Path
    >>> from dprobe.config import ArchiveSettings
    >>> async def main(stop):  # doctest: +SKIP
    ...     async with Archiver(ArchiveSettings(out_dir=Path("archive"))) as a:
    ...         await a.run(stop)
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import warnings
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaConnectionError

from dprobe.clock import Clock, SystemClock
from dprobe.config import ArchiveSettings
from dprobe.kafka_auth import start_client
from dprobe.lifecycle import AsyncService
from dprobe.schema import ClusterReport, HostSnapshot, JobEvent, SchemaError, decode
from dprobe.sinks.archive_schema import KINDS, row_of
from dprobe.sinks.parquet_archive import ArchiveWriter

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 30.0


# How often the consumer looks for a topic that appeared (Kafka's default: 5 minutes).
_METADATA_MAX_AGE_MS = 30_000


class Archiver(AsyncService):
    """Consumes the raw topics and archives them, following the commit order above.

    ``clock`` (:mod:`dprobe.clock`, default the system clock) times ``flush_interval_s``
    on its monotonic time.
    """

    def __init__(
        self,
        settings: ArchiveSettings,
        *,
        writer: ArchiveWriter | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.writer = writer or ArchiveWriter(
            settings.out_dir, compression_level=settings.compression_level
        )
        self.clock: Clock = clock or SystemClock()
        k = settings.kafka
        self.kinds = {k.topic(kind): kind for kind in KINDS}
        self.consumer: AIOKafkaConsumer | None = None
        self.records = 0
        self.invalid_records = 0
        self._next: dict[TopicPartition, int] = {}
        self._lock = asyncio.Lock()
        self._last_flush = self.clock.monotonic()
        self._present: set[str] = set()
        self._end_at: dict[TopicPartition, int] = {}  # what --until-end reads up to
        self._started = False
        self._stopped = False

    async def start(self) -> None:
        """Join the consumer group (partitions arrive at the first :meth:`poll`)."""
        if self._started:
            return
        self._started = True
        self.consumer = AIOKafkaConsumer(
            **self.settings.kafka.client_kwargs(),
            group_id=self.settings.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            metadata_max_age_ms=_METADATA_MAX_AGE_MS,
        )
        consumer = self.consumer
        await start_client(consumer.start, consumer.stop, self.settings.kafka, KafkaConnectionError)
        self._present = set(self.kinds) & set(await consumer.topics())  # all topics: none named
        for topic in self.kinds:
            if topic not in self._present:
                log.info(
                    "topic %s does not exist (or is not visible); archived once it appears", topic
                )
        consumer.subscribe(pattern=topic_pattern(self.kinds), listener=_Rebalance(self))

    async def poll(self, timeout_ms: int = 500) -> int:
        """Read one batch, buffer it, flush+commit when a threshold is met; records read."""
        assert self.consumer is not None, "call start() first"
        batches = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=10_000)
        n = 0
        for tp, records in batches.items():
            kind = self.kinds[tp.topic]
            for r in records:
                n += 1
                try:
                    msg = _decode(kind, r.value)
                except SchemaError:
                    self.invalid_records += 1
                    continue
                self.writer.add(
                    kind,
                    row_of(
                        kind,
                        msg,
                        key=r.key,
                        value=r.value,
                        partition=tp.partition,
                        offset=r.offset,
                        timestamp_ms=r.timestamp,
                    ),
                )
                self.records += 1
            if records:
                self._next[tp] = records[-1].offset + 1
        if self._due():
            await self.flush()
        return n

    def _due(self) -> bool:
        s, w = self.settings, self.writer
        if w.buffered_records >= s.flush_records or w.buffered_bytes >= s.flush_bytes:
            return True
        return bool(self._next) and self.clock.monotonic() - self._last_flush >= s.flush_interval_s

    async def flush(self) -> None:
        """Steps 2 and 3 of the commit order: write every buffer durably, then commit."""
        async with self._lock:
            if self.writer.buffered_records:
                paths = await asyncio.to_thread(self.writer.flush)
                log.debug("archived %d file(s)", len(paths))
            if self._next and self.consumer is not None:
                offsets, self._next = dict(self._next), {}
                try:
                    await self.consumer.commit(offsets)
                except CommitFailedError as exc:
                    # Partitions moved to another member; it deletes and rewrites the
                    # uncommitted files, so nothing is lost or doubled.
                    log.warning("offset commit failed after a rebalance: %s", exc)
            self._last_flush = self.clock.monotonic()

    async def caught_up(self) -> bool:
        """True when every assigned partition has been read to the end it had when this
        archiver first found it assigned (or none of the topics existed at :meth:`start`:
        nothing to read). Records written since do not count, so a one-off export of a
        topic that is still being written to ends."""
        assert self.consumer is not None
        assigned = self.consumer.assignment()
        if not assigned:
            return not self._present
        new = [tp for tp in assigned if tp not in self._end_at]
        if new:
            self._end_at.update(await self.consumer.end_offsets(new))
        for tp in assigned:
            if await self.consumer.position(tp) < self._end_at[tp]:
                return False
        return True

    async def run(
        self,
        stop: asyncio.Event,
        *,
        until_end: bool = False,
        progress_every_s: float = PROGRESS_EVERY_S,
    ) -> None:
        """Poll until ``stop`` is set (or, with ``until_end``, until caught up); log the
        progress every ``progress_every_s`` seconds (records and files so far, and the
        records polled but not yet written)."""
        said = time.monotonic()
        while not stop.is_set():
            await self.poll()
            if time.monotonic() - said >= progress_every_s:
                said = time.monotonic()
                log.info(
                    "archived %d records in %d file(s) so far; %d invalid",
                    self.writer.records_written, self.writer.files_written,
                    self.invalid_records,
                )  # fmt: skip
            if until_end and await self.caught_up():
                break

    async def stop(self) -> None:
        """Flush, commit and leave the group. Idempotent."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        try:
            await self.flush()
        finally:
            if self.consumer is not None:
                await self.consumer.stop()
        log.info(
            "archive stopped: %d records in %d file(s); %d invalid record(s) not archived",
            self.writer.records_written,
            self.writer.files_written,
            self.invalid_records,
        )

    def __del__(self) -> None:
        if self._started and not self._stopped:
            warnings.warn(
                "Archiver was started but never stopped: buffered rows were not written",
                ResourceWarning,
                stacklevel=1,
            )

    async def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        """Delete files of the assigned partitions that were never committed."""
        assert self.consumer is not None
        missing = []
        for tp in assigned:
            committed = await self.consumer.committed(tp)
            if committed is None:
                missing.append(tp)
            else:
                self.writer.remove_uncommitted(self.kinds[tp.topic], tp.partition, committed)
        if missing:
            starts = await self.consumer.beginning_offsets(missing)
            for tp in missing:
                self.writer.remove_uncommitted(self.kinds[tp.topic], tp.partition, starts[tp])


def topic_pattern(topics: Iterable[str]) -> str:
    """A regular expression that matches exactly ``topics``.

    >>> p = topic_pattern(["dprobe.jobs", "dprobe.cluster"])
    >>> [bool(re.match(p, t)) for t in ("dprobe.jobs", "dprobe.cluster", "dprobeXjobs")]
    [True, True, False]
    """
    return "^(?:" + "|".join(re.escape(t) for t in sorted(topics)) + ")$"


def _decode(kind: str, value: bytes | None) -> HostSnapshot | JobEvent | ClusterReport:
    """The message of a record of topic ``kind``; :class:`SchemaError` when invalid."""
    if kind == "samples":
        return decode(value, HostSnapshot)
    if kind == "cluster":
        return decode(value, ClusterReport)
    return decode(value, JobEvent)


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, archiver: Archiver) -> None:
        self.archiver = archiver

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            await self.archiver.flush()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.archiver._on_assigned(set(assigned))
