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
What was noted in 1 for a partition is forgotten whenever it is revoked or assigned:
it is read again from its committed offset, never committed from memory.

Failures:

- the archive folder is checked at :meth:`Archiver.start` (created, a probe file written
  and removed): :class:`~dprobe.errors.UsageError` naming it when that fails; a start
  that fails (Kafka unreachable) removes the folders it made;
- a flush that cannot write a file (disk full, ...) stops the archiver: nothing is
  committed, :meth:`Archiver.poll` and :meth:`Archiver.run` raise the error
  (:class:`~dprobe.sinks.parquet_archive.ArchiveWriteError` for an ``OSError``), also when
  it happened in the flush of a rebalance, and :meth:`Archiver.stop` does not flush again;
- a commit that fails because the group is rebalancing, the subscription just changed, or
  the coordinator cannot be reached is logged (one warning until a commit succeeds) and
  tried again at the next flush; the files stay, and a restart before then reads the
  records again and overwrites them.

Example:
    >>> from pathlib import Path
    >>> from dprobe.config import ArchiveSettings
    >>> async def main(stop):  # doctest: +SKIP
    ...     async with Archiver(ArchiveSettings(out_dir=Path("archive"))) as a:
    ...         await a.run(stop)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
)

from dprobe.clock import Clock, SystemClock
from dprobe.config import ArchiveSettings, KafkaSettings
from dprobe.consumer_stop import abandon, stop_consumer
from dprobe.errors import DprobeError, UsageError
from dprobe.kafka_auth import start_client
from dprobe.lifecycle import AsyncService
from dprobe.schema import SchemaError
from dprobe.sinks.archive_manifest import LOCK_NAME, MANIFEST_NAME, ArchiveManifest
from dprobe.sinks.archive_schema import KINDS, decode_record, row_of
from dprobe.sinks.parquet_archive import ArchiveWriter, list_files

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 30.0
# At stop, how long the last commit and the consumer's close may wait for Kafka: past
# them the archive ends anyway (its files are written; what was not committed is read
# again at the next start), within the units' TimeoutStopSec of 60 s.
STOP_COMMIT_S = 10.0
STOP_CLIENT_S = 10.0


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
        self._failure: Exception | None = None  # a failed flush: the archiver is stopping
        self._commit_failing = False
        self._invalid_said_at: float | None = None  # when an invalid record was last named
        self._invalid_unsaid = 0
        # per partition, the offset after the last invalid record counted: one read again
        # (after a rebalance, from the committed offset) is not counted or named twice
        self._invalid_upto: dict[TopicPartition, int] = {}
        self.manifest: ArchiveManifest | None = None  # what the folder holds (set at start)

    async def start(self) -> None:
        """Check the archive folder, then join the consumer group (partitions arrive at the
        first :meth:`poll`). :class:`~dprobe.errors.UsageError` when the folder cannot be
        created or written to."""
        if self._started:
            return
        made = missing_folders(self.writer.out_dir)
        try:
            await self._start()
        except BaseException:  # Kafka unreachable, say: leave no empty folder behind
            await asyncio.to_thread(remove_made, made)
            raise

    async def _start(self) -> None:
        await asyncio.to_thread(self.writer.check_writable)
        await self._check_manifest()
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
        consumer.subscribe(pattern=topic_pattern(self.kinds), listener=_Rebalance(self))

    async def _check_manifest(self) -> None:
        """Refuse a folder that holds another archive (another group, cluster or topic);
        note whether every file in it is this archive's (a folder it made) or not (files
        of an older dprobe, which wrote no manifest)."""
        s = self.settings
        topics = {kind: s.kafka.topic(kind) for kind in KINDS}
        me = ArchiveManifest(s.group_id, await kafka_cluster_id(s.kafka), topics)
        written = await asyncio.to_thread(ArchiveManifest.load, self.writer.out_dir)
        if written is not None:
            if diff := me.differences(written):
                raise UsageError(
                    f"archive folder {self.writer.out_dir} holds the archive of "
                    f"{written.describe()}; this archive reads {'; '.join(diff)}. A folder "
                    "holds one archive: give this one a folder of its own (--out or "
                    "archive.out_dir), or run it with the folder's group, cluster and topics"
                )
            me.committed, me.adopted = written.committed, written.adopted
            me.cluster_id = me.cluster_id or written.cluster_id  # a broker that names none
            self.manifest = me
            return
        self.manifest = me
        me.adopted = any(list_files(self.writer.out_dir))  # saved at the first commit
        if not me.adopted:
            await asyncio.to_thread(me.save, self.writer.out_dir, fsync=self.writer.fsync)
        else:
            log.warning(
                "archive folder %s has archive files but no %s (an older dprobe wrote it): "
                "files of a partition that group %r never committed are kept, and the "
                "archive stops rather than write over one",
                self.writer.out_dir, "dprobe-archive.json", s.group_id,
            )  # fmt: skip

    async def poll(self, timeout_ms: int = 500) -> int:
        """Read one batch, buffer it, flush+commit when a threshold is met; records read.

        Raises the error of a flush that failed (here or at a rebalance)."""
        assert self.consumer is not None, "call start() first"
        self._raise_failure()
        batches = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=10_000)
        self._raise_failure()  # a flush at a rebalance during getmany
        n = 0
        for tp, records in batches.items():
            kind = self.kinds[tp.topic]
            for r in records:
                n += 1
                if r.value is None and kind == "cluster":
                    continue  # a tombstone retires a source (docs/worker.md): no report
                try:
                    msg = decode_record(kind, r.value)
                except SchemaError as exc:
                    self._invalid(tp, r.offset, exc)
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

    def _invalid(self, tp: TopicPartition, offset: int, exc: SchemaError) -> None:
        """Count a record that is not archived and name it: the first, then one a minute
        (with the count since), so a flood of them does not flood the log. One read again
        is neither counted nor named again."""
        if offset < self._invalid_upto.get(tp, 0):
            return
        self._invalid_upto[tp] = offset + 1
        self.invalid_records += 1
        now = time.monotonic()
        if self._invalid_said_at is not None and now - self._invalid_said_at < 60.0:
            self._invalid_unsaid += 1
            return
        more = (
            f" ({self._invalid_unsaid} more since the last one named)"
            if self._invalid_unsaid
            else ""
        )
        log.warning(
            "%s partition %d offset %d not archived: %s%s (the worker sends it to the "
            "dead-letter topic)", tp.topic, tp.partition, offset, exc, more,
        )  # fmt: skip
        self._invalid_said_at, self._invalid_unsaid = now, 0

    def _due(self) -> bool:
        s, w = self.settings, self.writer
        if w.buffered_records >= s.flush_records or w.buffered_bytes >= s.flush_bytes:
            return True
        return bool(self._next) and self.clock.monotonic() - self._last_flush >= s.flush_interval_s

    async def flush(self, *, commit_within_s: float | None = None) -> None:
        """Steps 2 and 3 of the commit order: write every buffer durably, then commit.

        A write that fails stops the archiver: the error is raised now and by every later
        :meth:`poll` and :meth:`flush`, and nothing is committed. A commit that fails for a
        passing reason (see the module's docstring) is tried again at the next flush; any
        other commit error stops the archiver too. ``commit_within_s``: a commit Kafka has
        not taken by then is given up (the stop's last flush: Kafka may be gone)."""
        async with self._lock:
            self._raise_failure()
            try:
                await self._write_and_commit(commit_within_s)
            except Exception as exc:
                self._failure = exc
                raise
            self._last_flush = self.clock.monotonic()

    async def _write_and_commit(self, commit_within_s: float | None = None) -> None:
        if self.writer.buffered_records:
            paths = await asyncio.to_thread(self.writer.flush)
            log.debug("archived %d file(s)", len(paths))
        if self._next and self.consumer is not None:
            offsets, self._next = dict(self._next), {}
            running = asyncio.all_tasks()
            try:
                await asyncio.wait_for(self.consumer.commit(offsets), commit_within_s)
            except TimeoutError:
                if commit_within_s is None:  # not this wait's deadline: a failed commit
                    raise
                abandon(asyncio.all_tasks() - running)  # the commit aiokafka goes on with
                log.warning(
                    "offsets of %d partition(s) not committed: Kafka did not answer within "
                    "%g s; the files are kept, and the next start reads those records "
                    "again and writes their files anew",
                    len(offsets), commit_within_s,
                )  # fmt: skip
            except KafkaError as exc:
                if not _commit_retriable(exc):
                    raise
                self._commit_later(offsets, exc)
            else:
                for tp, offset in offsets.items():
                    self.writer.committed(self.kinds[tp.topic], tp.partition, offset)
                await self._note_committed(offsets)
                if self._commit_failing:
                    self._commit_failing = False
                    log.info("offsets committed again")

    async def _note_committed(self, offsets: dict[TopicPartition, int]) -> None:
        """Record committed offsets in the folder's manifest (after Kafka took them)."""
        if self.manifest is None:
            return
        done = {
            ArchiveManifest.key(self.kinds[tp.topic], tp.partition): n for tp, n in offsets.items()
        }
        await asyncio.to_thread(
            self.manifest.record, self.writer.out_dir, done, fsync=self.writer.fsync
        )

    def _commit_later(self, offsets: dict[TopicPartition, int], exc: KafkaError) -> None:
        """Keep ``offsets`` for the next flush (unless newer ones were noted meanwhile, or
        a rebalance forgets them first); warn once until a commit succeeds."""
        for tp, offset in offsets.items():
            self._next.setdefault(tp, offset)
        if self._commit_failing:
            log.debug("offsets still not committed: %s", exc)
            return
        self._commit_failing = True
        log.warning(
            "offsets not committed (%s); the files are kept and the commit is tried again "
            "at the next flush",
            _one_line(exc),
        )

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop what was read from ``partitions`` and not committed (noted offsets and
        buffered rows): they are read again from their committed offsets."""
        for tp in partitions:
            self._next.pop(tp, None)
            kind = self.kinds.get(tp.topic)
            if kind is not None:
                self.writer.discard(kind, tp.partition)

    async def caught_up(self) -> bool:
        """True when every assigned partition has been read to the end it had when this
        archiver first found it assigned (or none of the topics existed at :meth:`start`:
        nothing to read). Records written since do not count, so a one-off export of a
        topic that is still being written to ends. It waits for an assignment being handled:
        a partition fetched from its beginning meanwhile may yet be placed further on (the
        folder's record of it)."""
        assert self.consumer is not None
        async with self._lock:
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
        for topic in self.kinds:
            if topic not in self._present:
                later = "nothing to archive of it" if until_end else "archived once it appears"
                log.info("topic %s does not exist (or is not visible); %s", topic, later)
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
                self._say_unread()
                break

    def _say_unread(self) -> None:
        """Warn, at the end of an ``--until-end`` export, of the partitions of its topics
        that another member of the group holds (a running archive of the same group, or
        one killed less than a session timeout ago): this export did not read them."""
        assert self.consumer is not None
        mine = self.consumer.assignment()
        unread = []
        for topic in sorted(self._present):
            parts = sorted(
                p for p in self.consumer.partitions_for_topic(topic) or ()
                if TopicPartition(topic, p) not in mine
            )  # fmt: skip
            if parts:
                unread.append(f"{topic} partition(s) {', '.join(map(str, parts))}")
        if unread:
            log.warning(
                "--until-end: group %r has another member, which holds %s: this export did "
                "not read them (that member archives them into its own folder). Export with "
                "a group of its own (--group-id), or stop the other archive first",
                self.settings.group_id, "; ".join(unread),
            )  # fmt: skip

    async def stop(self) -> None:
        """Flush, commit and leave the group. Idempotent. After a failed flush it only
        leaves the group (the buffered rows are not written, their offsets not committed);
        the failure itself is raised by :meth:`poll`/:meth:`run`."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        try:
            if self._failure is None:
                await self.flush(commit_within_s=STOP_COMMIT_S)
        finally:
            if self.consumer is not None and not await stop_consumer(self.consumer, STOP_CLIENT_S):
                log.warning(
                    "the Kafka consumer did not stop cleanly (Kafka unreachable); its "
                    "connections are closed"
                )
        if self._failure is not None:
            log.info(
                "archive stopped after a failed flush: %d records in %d file(s) before it; "
                "the records since the last commit are read again at the next start",
                self.writer.records_written,
                self.writer.files_written,
            )
            return
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

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Flush (and commit) before the partitions go; then forget what was read from
        them. A failed flush is recorded, not raised: the rebalance goes on, and the next
        :meth:`poll` raises it."""
        try:
            await self.flush()
        except Exception:  # noqa: BLE001 - recorded by flush; the next poll raises it
            pass
        finally:
            async with self._lock:
                self._forget(revoked)

    async def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        """Forget what was read and not committed (``assigned`` is the whole new
        assignment), and delete files of the assigned partitions that were never
        committed: every partition is read again from its committed offset. aiokafka
        fetches the new assignment while this runs, so only what was read before it is
        forgotten (at once, before anything is awaited); rows read meanwhile are kept. A partition
        the group has no offset for is read from the manifest's record of it, else from
        its beginning (see :meth:`_without_offset`)."""
        assert self.consumer is not None
        async with self._lock:
            self._forget(set(self._next) | assigned)
            try:
                await self._clean_up(assigned)
            except DprobeError as exc:  # the next poll raises it, before any row is taken
                self._failure = exc
            except Exception as exc:  # noqa: BLE001 - aiokafka would only log it and go on
                names = ", ".join(sorted(f"{tp.topic}-{tp.partition}" for tp in assigned))
                self._failure = DprobeError(
                    f"partitions {names} "
                    f"were not placed ({_one_line(exc)}): stopped rather than read them again "
                    "from their beginning; a restart tries again"
                )

    async def _clean_up(self, assigned: set[TopicPartition]) -> None:
        """Delete the never-committed files of ``assigned``; place the partitions the
        group has no offset for (:meth:`_without_offset`)."""
        assert self.consumer is not None and self.manifest is not None
        missing = []
        unrecorded: dict[TopicPartition, int] = {}
        for tp in assigned:
            committed = await self.consumer.committed(tp)
            if committed is None:
                missing.append(tp)
            else:
                kind = self.kinds[tp.topic]
                self.writer.remove_uncommitted(kind, tp.partition, committed, discard=False)
                if ArchiveManifest.key(kind, tp.partition) not in self.manifest.committed:
                    unrecorded[tp] = committed
        if unrecorded and not self.manifest.adopted:
            await self._archived_elsewhere(unrecorded)
        if missing:
            await asyncio.to_thread(self.manifest.refresh, self.writer.out_dir)
            starts = await self.consumer.beginning_offsets(missing)
            ends = await self.consumer.end_offsets(missing)
            for tp in missing:
                self._without_offset(tp, starts[tp], ends[tp])

    async def _archived_elsewhere(self, committed: dict[TopicPartition, int]) -> None:
        """Warn when the group has committed partitions this folder has no record of (a
        new folder for a group that archived into another one): the records before those
        offsets are not in this folder, and will not be."""
        assert self.consumer is not None and self.manifest is not None
        await asyncio.to_thread(self.manifest.refresh, self.writer.out_dir)  # other members
        starts = await self.consumer.beginning_offsets(list(committed))
        lacking = [
            f"{tp.topic} partition {tp.partition} (offsets {starts[tp]} to {offset - 1})"
            for tp, offset in sorted(committed.items())
            if offset > starts[tp]
            and ArchiveManifest.key(self.kinds[tp.topic], tp.partition)
            not in self.manifest.committed
        ]
        if lacking:
            log.warning(
                "group %r has committed offsets that archive folder %s has no record of "
                "(the group archived into another folder, or this one was emptied): it "
                "starts at them and lacks %s. To archive a topic from its beginning into a "
                "new folder, give it a group of its own (--group-id)",
                self.settings.group_id, self.writer.out_dir, "; ".join(lacking),
            )  # fmt: skip

    def _without_offset(self, tp: TopicPartition, start: int, end: int) -> None:
        """A partition the group has no committed offset for (a new group, offsets that
        expired while the archive was stopped, a topic created again):

        - the manifest has archived it up to ``n``: go on from ``n`` (files from ``n`` on
          were never committed), or stop when the partition ends before ``n`` (another
          topic under the same name);
        - else, in a folder that is all this archive's, files from ``start`` on were
          written and never committed (a crash before the first commit): delete them;
        - else (files of an older dprobe): stop rather than write over one.
        """
        assert self.consumer is not None and self.manifest is not None
        kind = self.kinds[tp.topic]
        done = self.manifest.committed.get(ArchiveManifest.key(kind, tp.partition))
        if done is not None:
            if end < done:
                raise UsageError(
                    f"{tp.topic} partition {tp.partition} ends at offset {end}, but archive "
                    f"folder {self.writer.out_dir} holds it up to offset {done}: the topic was "
                    "created again. Archive the new topic into a folder of its own (--out or "
                    "archive.out_dir)"
                )
            if done < start:
                log.warning(
                    "%s partition %d: offsets %d to %d were deleted by the topic's retention "
                    "before they were archived", tp.topic, tp.partition, done, start - 1,
                )  # fmt: skip
            if done > start:
                log.warning(
                    "group %r has no committed offset for %s partition %d (expired while "
                    "the archive was stopped?); going on from offset %d, archived before",
                    self.settings.group_id, tp.topic, tp.partition, done,
                )  # fmt: skip
                self._forget({tp})  # read from the beginning meanwhile: read again from done
                self.consumer.seek(tp, done)
            self.writer.remove_uncommitted(kind, tp.partition, max(done, start), discard=False)
        elif (
            not self.manifest.adopted
        ):  # a folder this archive began: a crash before its first commit
            self.writer.remove_uncommitted(kind, tp.partition, start, discard=False)
        elif clash := next(
            (f for f in list_files(self.writer.out_dir, kind)
             if f.partition == tp.partition and f.last >= start),
            None,
        ):  # fmt: skip
            raise UsageError(
                f"archive folder {self.writer.out_dir} holds {clash.path.name}, which group "
                f"{self.settings.group_id!r} never committed: it may hold other data under "
                "the same offsets. Give this archive a folder of its own (--out or "
                "archive.out_dir), or move the folder's files away"
            )


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing


def remove_made(made: list[Path]) -> None:
    """Remove the folders ``made`` (:func:`missing_folders`) by a start that failed, and
    the manifest it wrote into a new archive folder; one that holds anything else stays."""
    for name in (MANIFEST_NAME, LOCK_NAME) if made and made[0].is_dir() else ():
        with contextlib.suppress(OSError):
            (made[0] / name).unlink(missing_ok=True)
    for folder in (f for f in made if f.is_dir()):  # one that was not made is skipped
        try:
            folder.rmdir()
        except OSError:  # not empty: it and its parents stay
            return


async def kafka_cluster_id(kafka: KafkaSettings) -> str:
    """The id of the Kafka cluster ``kafka`` reaches (what tells two clusters apart)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    await start_client(admin.start, admin.close, kafka, KafkaConnectionError)
    try:
        return str((await admin.describe_cluster()).get("cluster_id") or "")
    finally:
        await admin.close()


def topic_pattern(topics: Iterable[str]) -> str:
    """A regular expression that matches exactly ``topics``.

    >>> p = topic_pattern(["dprobe.jobs", "dprobe.cluster"])
    >>> [bool(re.match(p, t)) for t in ("dprobe.jobs", "dprobe.cluster", "dprobeXjobs")]
    [True, True, False]
    """
    return "^(?:" + "|".join(re.escape(t) for t in sorted(topics)) + ")$"


def _commit_retriable(exc: KafkaError) -> bool:
    """A commit error that passes: a rebalance took the partitions (``CommitFailedError``),
    the subscription changed and nothing is assigned yet (``IllegalStateError``), or the
    coordinator timed out or is unreachable (``KafkaTimeoutError``, a retriable error)."""
    passing = CommitFailedError | IllegalStateError | KafkaTimeoutError
    return exc.retriable or isinstance(exc, passing)


def _one_line(exc: Exception) -> str:
    """``IllegalStateError: No partitions assigned``: the error's name and text on one line."""
    name = type(exc).__name__
    text = " ".join(str(exc).split())
    return text if text.startswith(name) else f"{name}: {text}".rstrip(": ")


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, archiver: Archiver) -> None:
        self.archiver = archiver

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            await self.archiver._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.archiver._on_assigned(set(assigned))
