"""Ingest stage (keyed by host): validate, dedupe, split per tenant, forward by tenant.

Records of ``dprobe.samples`` are read in batches (up to ``batch_max`` records or
``batch_within_s`` seconds, settings of the worker). For each record: decode and
validate the HostSnapshot (anything invalid goes to the dead-letter topic with reason,
partition and offset, and the stream moves on); reject a snapshot stamped more than
``max_clock_skew_s`` after its Kafka record (reason ``clock_skew``; one less ahead is
taken, but moves event time only up to its record's time); drop a duplicate
``(host, seq)`` (neither moves event time); count
seq gaps per host; pre-aggregate the snapshot into one partial per tenant. The partials
of a batch go to the tenant-keyed updates topic as one message per tenant, so that topic
carries a few messages per batch instead of one per process sample.

Job events of ``dprobe.jobs`` are validated the same way and forwarded by tenant.

Every half second (or quarter window) of event time, each samples partition's progress (its newest
snapshot time) is broadcast to every partition of the updates topic: the window stage
closes a window only when every samples partition has passed it (see ``windows.py``).

The per-host sequence state lives in a changelog-backed table written only once the
partials it accounts for are *delivered*, so after a crash the state never claims a
snapshot whose partials were lost; a replay re-sends identical partials, which the window
stage ignores (it applies each ``(host, seq)`` once). All of this assumes that, after a
start or a rebalance, records are read in order from the committed offset, which faust's
own table recovery did not ensure (:mod:`dprobe.streams.recovery` makes it so).

Pipelining: the worker folds the next batch while the previous batches' partials are on
the way (:meth:`Ingest.submit`, at most ``depth`` batches behind). The rest of a batch
(await the partials' delivery, write the sequence state and await its changelog
delivery, announce progress) runs in order, batch after batch, in the background; only
then are the batch's records acknowledged to faust (:func:`hold_acks`), so an offset is
never committed before the outputs of its record were delivered. Until its state is
written, a batch's sequence states are kept in memory for the batches folded after it.
A batch whose outputs fail to leave ends the process (as a failed batch always did): the
worker restarts from its last commit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from dprobe import schema
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec, table_io
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.delivery import delivered
from dprobe.streams.host_key import wrong_key
from dprobe.streams.ranked_table import RANK_KEY
from dprobe.streams.state import seq_tracker
from dprobe.streams.state.window_agg import Partial, WindowSettings, split_snapshot
from dprobe.time_text import utc_text

log = logging.getLogger(__name__)
CONFLICT_WARN_EVERY_S = 600.0  # a host's conflicting snapshots are logged this seldom
DEPTH = 4  # batches whose outputs may still be on the way while the next one is folded


def hold_acks(events: Sequence[Any]) -> Callable[[], None]:
    """Keep faust from acknowledging ``events`` until the returned function is called.

    ``stream.take_events`` acknowledges a batch when the agent asks for the next one;
    one more reference on each message keeps that acknowledgement from being the last
    one, so the offsets stay uncommitted until the function drops it (once the
    batch's outputs are delivered).
    """
    for event in events:
        event.message.incref()

    def release() -> None:
        for event in events:
            message = event.message
            if event.ack():  # the last reference: the offset may now be committed
                event.app.sensors.on_message_out(message.tp, message.offset, message)

    return release


def exit_process(exc: BaseException) -> None:
    """End the worker at once without committing anything more (a supervisor restarts
    it from its last commit)."""
    log.critical(
        "a batch's outputs were not delivered; exiting without committing it", exc_info=exc
    )
    logging.shutdown()
    os._exit(70)


class Ingest:
    """The per-record logic of the ingest agents; faust objects are injected."""

    def __init__(
        self,
        *,
        hosts_table: Any,
        updates_topic: Any,
        deadletter: DeadLetters,
        window: WindowSettings,
        stats: WorkerStats,
        max_message_bytes: int,
        update_partitions: int,
        reset_after_s: float = 300.0,
        max_clock_skew_s: float = 300.0,
        quiet_probe: Callable[[list[int]], Awaitable[set[int]]] | None = None,
    ) -> None:
        self.hosts = hosts_table
        self.updates = updates_topic
        self.deadletter = deadletter
        self.window = window
        self.stats = stats
        self.max_bytes = max_message_bytes
        self.reset_after_s = reset_after_s
        self.max_clock_skew_s = max_clock_skew_s
        self.update_partitions = update_partitions
        self.quiet_probe = quiet_probe
        self._probe: asyncio.Task[None] | None = None  # the quiet probe under way, if any
        self._to_probe: dict[int, float] = {}  # partition -> when assigned, not probed yet
        # partitions reported empty (progress 0) while no progress was known anywhere
        self._told_empty: set[int] = set()
        self.wm_step_s = min(window.window_s / 4, 0.5)
        self._source_ts: dict[int, float] = {}
        self._announced: dict[int, int] = {}
        self._forwarded_at: dict[int, float] = {}
        self._assigned_at: dict[int, float] = {}
        self._seen_offset: dict[int, int] = {}
        self._in_flight: Counter[int] = Counter()  # partition -> its batches on the way
        self._unwritten: dict[bytes, tuple[int, dict[str, Any]]] = {}  # key -> (batch, state)
        self._pending: deque[asyncio.Future[None]] = deque()
        self._batches = 0
        # host -> when last warned (monotonic), oldest first; none older than the interval
        self._conflict_warned: dict[str, float] = {}
        self.depth = DEPTH
        self.on_failure: Callable[[BaseException], None] = exit_process

    async def on_snapshots(self, events: Sequence[Any]) -> None:
        """Fold one batch of ``dprobe.samples`` records (faust events, in read order) and
        return once all its effects are delivered (:meth:`submit`, then :meth:`drain`)."""
        await self.submit(events)
        await self.drain()

    async def submit(
        self, events: Sequence[Any], *, release: Callable[[], None] | None = None
    ) -> None:
        """Fold one batch and send its partials; the rest follows in the background.

        Order of effects, so that nothing is lost or counted twice after a crash: the
        partials of the whole batch (one message per tenant) are sent and their delivery
        awaited; only then is the per-host sequence state written (and its delivery
        awaited); then each source's progress is announced; then ``release`` is called
        (the batch's records may be committed). Batches complete in the order they were
        submitted. A crash before the state write replays the batch: the window stage
        ignores the partials it already applied (per ``(host, seq)``).

        Returns once the batch is folded and no more than ``depth`` batches (this one
        included) are still on the way. With ``release`` (the worker's agent), a batch
        that fails after this returned calls ``on_failure`` (by default: the process
        exits).
        """
        seen = {event.message.partition: event.message.offset for event in events}
        self._in_flight.update(seen.keys())  # not idle while their records are on the way
        self._batches += 1
        batch_id = self._batches
        try:
            sent, hosts, progress = await self._fold(events)
        except BaseException:
            self._landed(seen)
            raise
        for key, (_, state) in hosts.items():
            self._unwritten[key] = (batch_id, state)
        task = asyncio.ensure_future(
            self._complete(
                previous=self._pending[-1] if self._pending else None,
                batch_id=batch_id,
                sent=sent,
                hosts=hosts,
                progress=progress,
                seen=seen,
                release=release,
            )
        )
        if release is not None:
            task.add_done_callback(self._check)
        self._pending.append(task)
        while self._pending and self._pending[0].done():
            await self._pending.popleft()
        while len(self._pending) > self.depth:
            await self._pending.popleft()

    async def submit_held(self, events: Sequence[Any]) -> None:
        """:meth:`submit` for the worker's agent: faust acknowledges ``events`` only once
        the batch's outputs were delivered (:func:`hold_acks`)."""
        await self.submit(events, release=hold_acks(events))

    async def drain(self) -> None:
        """Wait until every submitted batch completed (raises what made one fail)."""
        while self._pending:
            await self._pending[0]
            self._pending.popleft()

    def _check(self, task: asyncio.Future[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.on_failure(task.exception())  # type: ignore[arg-type]

    async def _complete(
        self,
        *,
        previous: asyncio.Future[None] | None,
        batch_id: int,
        sent: list[Any],
        hosts: dict[bytes, tuple[int, dict[str, Any]]],
        progress: dict[int, float],
        seen: dict[int, int],
        release: Callable[[], None] | None,
    ) -> None:
        try:
            if previous is not None:
                await asyncio.shield(previous)  # in order: its state and progress first
            await delivered(sent, f"partials (or dead letters) of samples batch {batch_id}")
            writes = [
                await table_io.put(self.hosts, partition, key, codec.dumps(state))
                for key, (partition, state) in hosts.items()
            ]
            for source, ts in sorted(progress.items()):
                await self._advance(source, ts)
            for fut in writes:
                if fut is not None:
                    await fut
            if release is not None:
                release()
        finally:
            for key in hosts:
                if self._unwritten.get(key, (None,))[0] == batch_id:
                    del self._unwritten[key]
            self._landed(seen)

    def _landed(self, seen: dict[int, int]) -> None:
        self._in_flight.subtract(seen.keys())
        for partition in seen:
            if self._in_flight[partition] <= 0:
                del self._in_flight[partition]
        self._seen_offset.update(seen)

    async def _fold(
        self, events: Sequence[Any]
    ) -> tuple[list[Any], dict[bytes, tuple[int, dict[str, Any]]], dict[int, float]]:
        """Decode, validate, dedupe and split one batch; send its partials. Returns their
        delivery futures, the batch's new sequence states and each source's progress."""
        by_tenant: dict[str, list[Partial]] = {}
        hosts: dict[bytes, tuple[int, dict[str, Any]]] = {}
        progress: dict[int, float] = {}
        letters: list[Any] = []  # dead letters' deliveries, awaited with the partials'
        for event in events:
            message = event.message
            try:
                snap = schema.decode_snapshot(event.value, max_bytes=self.max_bytes)
            except schema.SchemaError as exc:
                letters.append(await self.deadletter.send(event.value, exc, message, wait=False))
                continue
            reference, what = self._reference_clock(message)
            skew = self._skew(snap.ts, reference, what)
            if skew is not None:
                letters.append(await self.deadletter.send(event.value, skew, message, wait=False))
                continue
            keyed = wrong_key(message.key, snap.host)
            if keyed is not None:
                letters.append(await self.deadletter.send(event.value, keyed, message, wait=False))
                continue
            try:
                parts = self._observe(snap, message.partition, hosts, message.offset)
            except Exception as exc:  # noqa: BLE001 - a bug, not bad input; logged there
                letters.append(
                    await self.deadletter.processing_error(event.value, exc, message, wait=False)
                )
                continue
            if parts is None:  # a duplicate moves nothing, event time included
                continue
            for part in parts:
                by_tenant.setdefault(part.tenant, []).append(part)
            # never past the reference clock: a host whose clock runs ahead (within
            # max_clock_skew_s) does not close the other hosts' windows early
            reached = min(snap.ts, reference)
            progress[message.partition] = max(progress.get(message.partition, 0.0), reached)
        sent = letters + [
            await self.updates.send(key=tenant.encode(), value=value)
            for tenant, parts in sorted(by_tenant.items())
            for value in self._messages(parts)
        ]
        return sent, hosts, progress

    def _observe(
        self,
        snap: schema.HostSnapshot,
        partition: int,
        hosts: dict[bytes, tuple[int, dict[str, Any]]],
        offset: int,
    ) -> list[Partial] | None:
        """Dedupe and gap-count one snapshot; its partials (``None`` for a duplicate).
        The host's new state records the highest ``offset`` (the snapshot's offset in its
        partition) it accounts for as its rank, so a restore never takes an older state
        for it (``RankedTable``)."""
        key = snap.host.encode()
        known = hosts.get(key) or self._unwritten.get(key)  # this batch's, or one on the way
        state = known[1] if known else codec.loads(self.hosts.get(key)) or seq_tracker.initial()
        if self._before_reset(state, snap, offset):
            self.stats.duplicates += 1
            return None
        state, verdict, lost = seq_tracker.observe(
            state, seq=snap.seq, ts=snap.ts, reset_after_s=self.reset_after_s
        )
        state[RANK_KEY] = max(offset, state.get(RANK_KEY, -1))  # the highest it accounts for
        hosts[key] = (partition, state)
        if verdict == "duplicate":
            self.stats.duplicates += 1
            return None
        if verdict == "conflict":
            self._conflict(snap, state)
            return None
        if verdict == "suspect":  # a restart or a jump of its sequence, or a spoof
            log.info(
                "host %s: seq %d at %.3f (seq %d taken last) is taken only if the host's "
                "next snapshot continues from it",
                snap.host, snap.seq, snap.ts, state["seq"],
            )  # fmt: skip
            return None
        if verdict == "reset":
            self.stats.resets += 1
            log.warning("host %s restarted its sequence at %d", snap.host, snap.seq)
        if lost:
            self.stats.lose(snap.host, lost, time.monotonic())
        self.stats.snapshots += 1
        self.stats.process_samples += len(snap.procs)
        seq = seq_tracker.effective_seq(state, snap.seq)  # rises across the host's resets
        return split_snapshot(snap, self.window, lost=lost, seq=seq)

    def _before_reset(self, state: dict[str, Any], snap: schema.HostSnapshot, offset: int) -> bool:
        """Whether ``snap`` is one from before its host's sequence restarted, read again
        (a replay from the last commit): a seq above the last one taken, far older than
        the newest snapshot, at an offset the host's state accounts for already. Taken
        as new, it would count twice and make the host's next snapshots conflicts."""
        return (
            state.get("resets", 0) > 0
            and snap.seq > state["seq"]
            and snap.ts < state["ts"] - self.reset_after_s
            and offset <= state.get(RANK_KEY, -1)
        )

    def _conflict(self, snap: schema.HostSnapshot, state: dict[str, Any]) -> None:
        """Count a conflicting snapshot (dropped) and say why, once per host and
        :data:`CONFLICT_WARN_EVERY_S`: nothing else tells that a host's data is missing."""
        now = time.monotonic()
        self.stats.conflict(snap.host, now)
        warned = self._conflict_warned
        last = warned.get(snap.host)
        if last is not None and now - last < CONFLICT_WARN_EVERY_S:
            return
        warned.pop(snap.host, None)  # re-inserted last: the map stays in order of warning
        warned[snap.host] = now
        # hosts warned about longer ago than the interval would be warned about again
        # anyway: forget them, so host ids that come and go do not pile up here
        while warned:
            oldest = next(iter(warned))
            if now - warned[oldest] < CONFLICT_WARN_EVERY_S:
                break
            del warned[oldest]
        log.warning(
            "host %s: dropped snapshot seq %d of %s: seqs up to %d are taken already, and a "
            "redelivery is never newer than them, so a second collector sends under this host "
            "id, or one restarted with a fresh state_dir (taken again once %.0f s newer than "
            "the newest taken); "
            "dprobe_conflicting_snapshots_total{host} counts them",
            snap.host, snap.seq, utc_text(snap.ts),
            state["seq"], self.reset_after_s,
        )  # fmt: skip

    def _messages(self, parts: list[Partial]) -> list[bytes]:
        """One tenant's partials as update messages, each under half the message limit
        (thousands of a tenant's hosts in one batch still fit), in order."""
        value = codec.encode_partials(parts)
        if len(value) <= self.max_bytes // 2 or len(parts) == 1:
            return [value]
        half = len(parts) // 2
        return self._messages(parts[:half]) + self._messages(parts[half:])

    @staticmethod
    def _reference_clock(message: Any) -> tuple[float, str]:
        """The clock a snapshot's time is held to, and its name: its Kafka record's
        timestamp (the broker's clock where the topic uses LogAppendTime, as the topics
        dprobe creates do), or this worker's own clock where the record has none or one
        ahead of it (a topic with producer timestamps, a host whose clock is wrong for both)."""
        record_ts = getattr(message, "timestamp", None)
        now = time.time()
        if record_ts is not None and 0 < record_ts <= now:  # -1: a record without one
            return record_ts, "its record's"
        return now, "the worker's"

    def _skew(self, ts: float, reference: float, what: str) -> schema.SchemaError | None:
        """A snapshot (or job event) stamped more than ``max_clock_skew_s`` after the
        reference clock would move its partition's event time into the future and hold
        every tenant's windows; it is rejected. (A snapshot stamped less ahead is taken,
        but moves its partition's progress only up to the reference clock.)"""
        if ts <= reference + self.max_clock_skew_s:
            return None
        return schema.SchemaError(
            f"timestamp {ts:.3f} is {ts - reference:.0f} s ahead of {what} clock "
            f"{reference:.3f} (max_clock_skew_s {self.max_clock_skew_s:g})",
            "clock_skew",
        )

    async def _advance(self, source: int, ts: float) -> None:
        """Tell every window partition how far this samples partition has been forwarded.

        Sent after the partials (same producer, so they arrive first) each time the
        partition's newest event time crosses a step of half a second (a quarter window
        when windows are shorter than 2 s).
        """
        self._forwarded_at[source] = time.monotonic()
        newest = max(self._source_ts.get(source, 0.0), ts)
        self._source_ts[source] = newest
        step = int(newest // self.wm_step_s)
        if step <= self._announced.get(source, -1):
            return
        self._announced[source] = step
        await self._broadcast(source, newest)

    async def _broadcast(self, source: int, ts: float) -> None:
        value = codec.encode_watermark(codec.SourceWatermark(source=source, ts=ts))
        for k in range(self.update_partitions):
            await self.updates.send(key=b"", value=value, partition=k)

    async def report_idle_sources(
        self,
        assigned: Mapping[int, int | None],
        newest_elsewhere: float = 0.0,
        *,
        flowing: bool = True,
    ) -> None:
        """Report idle samples partitions at the newest progress this worker knows, so
        they hold no window.

        ``assigned`` maps each samples partition this worker owns to its high watermark
        (``None`` when not known yet). A partition is idle when it forwarded nothing for
        ``source_idle_s`` of wall time since it was assigned or last forwarded, and it is
        read to its end (a partition with a backlog is slow, not idle; one this worker
        has not read a record of since it was assigned counts by time alone). Newly
        assigned partitions are handed to ``quiet_probe`` in the background; one it
        finds quiet for that long already (its previous owner read it to the end, and
        Kafka holds no record of it newer than ``source_idle_s``:
        :mod:`dprobe.streams.quiet_sources`) counts as idle from the next call on, if it
        is still assigned, so a takeover does not wait ``source_idle_s`` anew for it.
        ``newest_elsewhere`` is the newest progress other workers' partitions reported (seen
        by this worker's window stage), so a worker whose own partitions are all empty
        still releases them. While records cannot flow (``flowing`` false: a rebalance,
        or the tables' restore after it, which can take longer than ``source_idle_s``),
        nothing is reported, and the idle clock of a partition not read since it was
        assigned starts only once they can: its backlog is not taken for idleness.

        While no progress is known anywhere (no samples partition has forwarded a
        snapshot), an idle partition is reported once at progress 0: it holds nothing.
        Window partitions close windows only once every samples partition has reported,
        and let job events alone drive time only while every one stands at 0, so the job
        events of a backlog, read first, do not make its telemetry late.
        """
        now = time.monotonic()
        for source in list(self._assigned_at):
            if source not in assigned:  # revoked: what we knew of it is stale
                del self._assigned_at[source]
                self._seen_offset.pop(source, None)
                self._to_probe.pop(source, None)
                self._told_empty.discard(source)
        if not flowing:
            for source in assigned:
                if source not in self._seen_offset:
                    self._assigned_at.pop(source, None)
                    self._to_probe.pop(source, None)
                    self._told_empty.discard(source)
            return
        fresh = [s for s in assigned if s not in self._assigned_at and s not in self._seen_offset]
        for source in fresh:
            self._assigned_at[source] = now
            self._to_probe[source] = now
        if self._to_probe and self.quiet_probe is not None and self._probe is None:
            asked, self._to_probe = self._to_probe, {}
            self._probe = asyncio.ensure_future(self._ask_quiet(self.quiet_probe, asked))
        newest = max(max(self._source_ts.values(), default=0.0), newest_elsewhere)
        for source, highwater in sorted(assigned.items()):
            since = max(
                self._assigned_at.setdefault(source, now), self._forwarded_at.get(source, 0.0)
            )
            seen = self._seen_offset.get(source)
            caught_up = seen is None or (highwater is not None and seen + 1 >= highwater)
            idle = (
                source not in self._in_flight
                and caught_up
                and now - since >= self.window.source_idle_s
            )
            if not idle:
                continue
            if newest > 0.0 and self._source_ts.get(source, 0.0) < newest:
                self._source_ts[source] = newest
                await self._broadcast(source, newest)
            elif newest <= 0.0 and source not in self._told_empty:
                self._told_empty.add(source)
                await self._broadcast(source, 0.0)

    async def _ask_quiet(
        self, probe: Callable[[list[int]], Awaitable[set[int]]], asked: dict[int, float]
    ) -> None:
        """Backdate the idle clock of each partition of ``asked`` (partition -> when it
        was assigned) that ``probe`` finds quiet, unless it was revoked or assigned again
        meanwhile."""
        try:
            quiet = await probe(sorted(asked))
            for source in quiet & asked.keys():
                if self._assigned_at.get(source) == asked[source]:
                    self._assigned_at[source] = asked[source] - self.window.source_idle_s
        except Exception:  # a hint only: the idle clock times it as before
            log.info("quiet probe of samples partitions %s failed", sorted(asked), exc_info=True)
        finally:
            self._probe = None

    async def on_job_events(self, events: Sequence[Any]) -> None:
        """Forward one batch of ``dprobe.jobs`` records (faust events, in read order) to
        their tenants' window partitions, invalid ones and ones stamped more than
        ``max_clock_skew_s`` ahead of their reference clock to the dead-letter topic, and
        return once every send was delivered
        (:class:`~dprobe.streams.delivery.DeliveryFailed` otherwise: the batch must not
        be acknowledged)."""
        sent = []
        for event in events:
            message = event.message
            try:
                ev = schema.decode_job_event(event.value, max_bytes=self.max_bytes)
                reference, what = self._reference_clock(message)
                error = self._skew(ev.ts, reference, what)
            except schema.SchemaError as exc:
                error = exc
            if error is not None:
                sent.append(await self.deadletter.send(event.value, error, message, wait=False))
                continue
            self.stats.job_events += 1
            # an event stamped ahead of its reference clock: its update carries that clock,
            # and the window stage moves job event time only up to it, however late this
            # worker forwards it (others keep the send's own time, as every update does)
            ahead = reference if ev.ts > reference else None
            update = codec.encode_job(ev)
            key = ev.tenant.encode()
            sent.append(await self.updates.send(key=key, value=update, timestamp=ahead))
        await delivered(sent, f"a batch of {len(events)} job event(s)")
