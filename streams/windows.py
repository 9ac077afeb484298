"""Window stage (keyed by tenant): event-time tumbling windows closed by a watermark.

Faust's own window expiry runs on a wall-clock timer and hands ``on_window_close`` the
wrong value, so windows here are plain state closed on *event time*. The ingest stage
broadcasts each samples partition's progress (newest snapshot time forwarded); in each
window partition the watermark is the lowest progress over all samples partitions minus
``grace_s``. So a partition that lags (a backlog after an outage, a slow consumer) holds
windows open instead of having its data dropped, and a partition that has not reported
yet holds them too. A samples partition with nothing to forward for ``source_idle_s`` of
wall time (empty, or its hosts went silent) is reported by the ingest stage at the
newest progress it knows, so it stops holding windows. Without samples at all (job
events only) the watermark is the newest event time minus ``grace_s``. A window closes
when its end is at or below the watermark; a partial for a window that already closed
is late: it is counted and dropped.

Table layout (one changelog-backed table, values are msgspec JSON; every value is split
into shards and kept under a byte budget, see :mod:`dprobe.streams.state.bounds`):

- ``w|TENANT|START`` and ``w|TENANT|START|s<k>``: the window state of
  :mod:`dprobe.streams.state.window_agg`, split by host into ``host_shards`` shards
  (merged when the window closes);
- ``jb|TENANT|JOB``: one job of the tenant's job book (:mod:`dprobe.streams.state.job_book`,
  ``JOB`` the job's digest), with the level the injected ``level_of`` predicts for it when
  it is first seen; a job event rewrites that one value, whatever the number of jobs. The
  books of a partition's tenants are indexed in memory, read from the table again when
  ``jt|PARTITION`` (which instance last wrote them) is not this instance's own. A book
  stored whole by an older worker (``j|TENANT`` and ``j|TENANT|s<k>``) is moved job by job
  when first read. The byte budget is kept per ``book_shards`` share of a book;
- ``p|PARTITION`` and ``p|PARTITION|i<k>``: the partition's
  :class:`~dprobe.streams.state.partition.PartitionState` (watermark sources, closed and
  reported progress; its tenant index in ``index_shards`` shards) in its stored form;
  ``upto`` is the progress last reported to the planning stage (every window ending at
  or before it is out; a partial for such a window is late); ``layout``, the shard counts
  the partition is stored under, so a worker with other ``index_shards`` or
  ``host_shards`` moves the index and finds the hosts of the windows open then.

A record that would take a value past ``max_state_bytes`` is sent to the dead-letter
topic with reason ``state_full`` and changes nothing.

Updates are read in batches and applied in the order of their partition's log; the
states a batch touches are decoded once and written back once, at the end of the batch.
A window is closed right after the update that moves the watermark past its end, so its
content depends only on the log, never on where a batch happens to end.

Commit order (written down once, relied on for exactly-once *effects*): on close, every
TenantWindow of that window start is produced and its delivery awaited; then the
partition state (closed_end, open index) is written; then the window states are
deleted; then the job books drop what the closed windows used. A crash before the
partition state is written re-emits identical windows on
replay (same state, same inputs); after it, replayed partials of those windows are late.
Window states record the last ``seq`` applied per host, so a replayed partial is never
added twice. Faust flushes the producer (changelog included) before committing source
offsets.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dprobe import schema
from dprobe.models.job_flow import job_flow, pending_effective_gpus
from dprobe.models.levels import Level
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec, table_io
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.ranked_table import RANK_KEY
from dprobe.streams.state import job_book
from dprobe.streams.state.bounds import StateFull, shard_key, shard_of
from dprobe.streams.state.partition import PartitionState
from dprobe.streams.state.window_agg import (
    HOST_ENTRY_BYTES,
    Partial,
    WindowSettings,
    add_into,
    bytes_bound,
    initial,
    is_new_host,
    merge,
    result,
)
from dprobe.time_text import utc_text

log = logging.getLogger(__name__)
LATE_LOG_INTERVAL_S = 60.0


def _wkey(tenant: str, start: float, shard: int = 0) -> bytes:
    return shard_key(f"w|{tenant}|{start!r}".encode(), shard)


def _jkey(tenant: str, shard: int = 0) -> bytes:
    """A shard of a whole job book, as older workers stored it."""
    return shard_key(f"j|{tenant}".encode(), shard)


def _bprefix(tenant: str) -> bytes:
    return b"jb|" + tenant.encode() + b"|"


def _bkey(tenant: str, job: str) -> bytes:
    """One job (``job``: its digest) of ``tenant``'s job book."""
    return _bprefix(tenant) + job.encode()


def _tkey(partition: int) -> bytes:
    return b"jt|" + str(partition).encode()


def _spoken_of(books: Mapping[str, Any], base: float, w: float, count: int) -> dict[int, set[str]]:
    """For each ``i`` in ``0..count-1``, the tenants whose books (``books``: tenant ->
    book) have something to say about the window ``[base + i * w, base + i * w + w)``
    (what :meth:`job_book.TenantJobs.has_jobs_at` answers), each book read once."""
    out: dict[int, set[str]] = {}
    if count <= 0:
        return out

    def first_after(x: float) -> int:
        """The smallest ``i`` in ``0..count`` whose window ends after ``x`` (``count``:
        none), searched with the same arithmetic as the windows' ends."""
        lo, hi = 0, count
        while lo < hi:
            mid = (lo + hi) // 2
            if (base + mid * w) + w > x:
                hi = mid
            else:
                lo = mid + 1
        return lo

    for tenant, book in books.items():
        runs: list[tuple[int, int]] = []  # windows lo..hi-1
        active, ended, logged = book.spans()
        if active is not None:  # every window ending after its submit
            runs.append((first_after(active), count))
        for submit, stop in ended:  # windows ending after its submit, at or before its end
            runs.append((first_after(submit), first_after(stop)))
        for ts in logged:  # the window holding ts: start <= ts < end
            i = first_after(ts)
            if i < count and base + i * w <= ts:
                runs.append((i, i + 1))
        reached = 0
        for lo, hi in sorted(runs):
            for i in range(max(lo, reached), hi):
                out.setdefault(i, set()).add(tenant)
            reached = max(reached, hi)
    return out


class _JobIndex:
    """The job books of one partition's tenants as this instance last wrote them."""

    def __init__(self, token: Any) -> None:
        self.token = token  # the ``jt|PARTITION`` value they match
        self.books: dict[str, job_book.TenantJobs] = {}
        self.batch: Any = None  # the batch they were last checked for
        self.stamped = False  # whether that batch wrote this instance's token


def _pkey(partition: int, shard: int | None = None) -> bytes:
    base = f"p|{partition}".encode()
    return base if shard is None else base + b"|i" + str(shard).encode()


class _Batch:
    """The table values one partition's batch reads and writes, decoded once.

    Every map it stores also holds, under ``"off"``, the offset of the last tenant-updates
    record it accounts for (``off``: the record being applied; what a value read back
    already held, if higher), so the table restores by rank
    (:mod:`~dprobe.streams.ranked_table`); the rank is kept out of the values the window
    logic sees.
    """

    def __init__(self, table: Any, partition: int) -> None:
        self.table = table
        self.partition = partition
        self.values: dict[bytes, Any] = {}
        self.ranks: dict[bytes, int] = {}
        self.dirty: set[bytes] = set()
        self.off = -1
        # the host shard counts the partition's open windows are stored under (set when
        # the partition is loaded)
        self.host_counts: list[int] = [1]

    def get(self, key: bytes) -> Any:
        if key not in self.values:
            value = codec.loads(self.table.get(key))
            if isinstance(value, dict) and isinstance(rank := value.pop(RANK_KEY, None), int):
                self.ranks[key] = rank
            self.values[key] = value
        return self.values[key]

    def set(self, key: bytes, value: Any) -> None:
        self.values[key] = value
        self.dirty.add(key)

    async def write(self, key: bytes) -> None:
        """Write one value now (and no more at the end of the batch)."""
        value = self.values[key]
        if isinstance(value, dict):
            rank = self.ranks[key] = max(self.off, self.ranks.get(key, -1))
            value = {**value, RANK_KEY: rank}
        await table_io.put(self.table, self.partition, key, codec.dumps(value))
        self.dirty.discard(key)

    async def delete(self, key: bytes) -> None:
        self.values[key] = None
        self.ranks.pop(key, None)
        self.dirty.discard(key)
        await table_io.delete(self.table, self.partition, key)

    async def store(self, key: bytes) -> None:
        """Write the value of ``key`` now, or its tombstone when it is ``None``."""
        if self.values[key] is None:
            await self.delete(key)
        else:
            await self.write(key)

    async def flush(self) -> None:
        for key in sorted(self.dirty):
            await self.store(key)


class Windows:
    """The per-record logic of the window agent; faust objects are injected."""

    def __init__(
        self,
        *,
        table: Any,
        features_topic: Any,
        window: WindowSettings,
        stats: WorkerStats,
        sources: int,
        deadletter: DeadLetters,
        on_window: Any = None,
        on_progress: Any = None,
        level_of: Callable[[schema.JobEvent], Level | None] | None = None,
    ) -> None:
        self.table = table
        self.features = features_topic
        self.cfg = window
        self.stats = stats
        self.sources = sources
        self.deadletter = deadletter
        self.on_window = on_window
        self.on_progress = on_progress
        self.level_of = level_of
        self.newest_source_ts = 0.0  # highest progress any samples partition reported here
        self._late_logged_at = -math.inf
        self._late_unlogged = 0
        self._jobs: dict[int, _JobIndex] = {}  # partition -> its tenants' job books
        self._instance = os.urandom(8).hex()  # names this instance's writes of them
        self._writes = 0

    async def on_updates(self, events: Sequence[Any]) -> None:
        """Apply one batch of tenant-updates records (faust events, in read order)."""
        by_partition: dict[int, list[Any]] = {}
        for event in events:
            by_partition.setdefault(event.message.partition, []).append(event)
        for partition, evs in sorted(by_partition.items()):
            batch = _Batch(self.table, partition)
            ps = self._load_partition(batch)
            for event in evs:
                batch.off = event.message.offset
                await self._apply(event, ps, batch)
            self._stage_partition(ps, batch)
            await batch.flush()

    def _load_partition(self, batch: _Batch) -> PartitionState:
        p = batch.partition
        n = self.cfg.index_shards
        core = batch.get(_pkey(p))
        layout = core.get("layout") or {} if isinstance(core, dict) else {}
        stored = int(layout.get("index", n))  # stored by a worker with other counts?
        index = [batch.get(_pkey(p, k)) for k in range(stored)]
        ps = PartitionState.from_stored(
            core, index, index_shards=n, max_shard_bytes=self.cfg.max_state_bytes
        )
        for k in range(n, stored):  # moved into the shards of this worker's count
            if batch.get(_pkey(p, k)) is not None:
                batch.set(_pkey(p, k), None)
        host = self._host_layout(ps, layout.get("host"))
        ps.layout = {"index": n, "host": host}
        batch.host_counts = sorted({count for count, _ in host})
        return ps

    def _host_layout(self, ps: PartitionState, stored: Any) -> list[list[Any]]:
        """The host shard counts the partition's open windows may be stored under: this
        worker's (new windows take it) first, then each older one with the newest window
        start that may hold hosts under it, kept until that window is out. A worker
        restarted with another ``host_shards``, or a partition moved between workers with
        different ones, so finds every host of the windows open then."""
        mine = self.cfg.host_shards
        host = [list(e) for e in stored or ()] or [[mine, None]]
        if host[0][0] != mine:
            host[0][1] = ps.newest_open_start()  # the newest window it may hold hosts of
            host.insert(0, [mine, None])
        out = ps.out_before
        w = self.cfg.window_s
        older = [e for e in host[1:] if e[0] != mine and e[1] is not None and e[1] + w > out]
        return [host[0], *older]

    def _host_key(self, part: Partial, batch: _Batch) -> bytes:
        """The window shard that holds ``part.host`` already (under any count the
        partition's open windows use), else its shard under this worker's count."""
        mine = _wkey(part.tenant, part.window_start, shard_of(part.host, self.cfg.host_shards))
        for count in batch.host_counts:
            if count != self.cfg.host_shards:
                key = _wkey(part.tenant, part.window_start, shard_of(part.host, count))
                state = batch.get(key)
                if state is not None and not is_new_host(state, part.host):
                    return key
        return mine

    def _stage_partition(self, ps: PartitionState, batch: _Batch) -> list[bytes]:
        """Put the partition's changed index shards and its core into the batch; returns
        their keys (index shards first, the core last)."""
        keys = []
        for k in sorted(ps.dirty):
            key = _pkey(batch.partition, k)
            data = ps.index_plain(k)
            ps.dirty.discard(k)
            if data is None and batch.get(key) is None:
                continue
            batch.set(key, data)
            keys.append(key)
        batch.set(_pkey(batch.partition), ps.to_plain())
        keys.append(_pkey(batch.partition))
        return keys

    async def _apply(self, event: Any, ps: PartitionState, batch: _Batch) -> None:
        before = self.watermark(ps)
        try:
            update = codec.decode_update(event.value)
            if isinstance(update, list):
                for part in update:
                    self._on_partial(part, ps, batch)
            elif isinstance(update, codec.SourceWatermark):
                self._on_source(update, ps)
            else:
                self._on_job(update, ps, batch, getattr(event.message, "timestamp", None))
        except StateFull as exc:  # what was applied of it stays: replaying it is harmless
            await self.deadletter.send(event.value, exc, event.message)
        except Exception as exc:  # noqa: BLE001 - a bug, or not a message this worker wrote
            await self.deadletter.processing_error(event.value, exc, event.message)
            return
        # Closing produces windows: a failed delivery is not the record's fault, so it is
        # not caught here (the batch fails and the worker restarts from its last commit).
        if self.watermark(ps) > before:
            await self._close_ready(ps, batch)

    def _on_partial(self, part: Partial, ps: PartitionState, batch: _Batch) -> None:
        if part.window_start + self.cfg.window_s <= ps.out_before:
            self.stats.late_partials += 1
            self._log_late(part, ps)
            return
        key = self._host_key(part, batch)
        state = batch.get(key) or initial(part.tenant, part.window_start)
        limit = self.cfg.max_state_bytes
        if is_new_host(state, part.host) and bytes_bound(state) + HOST_ENTRY_BYTES > limit:
            raise StateFull(
                f"window {part.tenant!r}@{part.window_start!r} holds too many hosts for "
                f"{self.cfg.max_state_bytes} bytes per shard (host {part.host!r}); "
                "raise worker.window_host_shards or worker.max_state_bytes"
            )
        ps.open_window(part.tenant, part.window_start)
        if add_into(state, part):
            batch.set(key, state)

    def _log_late(self, part: Partial, ps: PartitionState) -> None:
        """One log line a minute at most about late data, with the reason."""
        self._late_unlogged += 1
        now = time.monotonic()
        if now - self._late_logged_at < LATE_LOG_INTERVAL_S:
            return
        log.warning(
            "%d late partial(s) dropped (e.g. host %s, tenant %s, window %s): their windows "
            "were already closed, every window ending at or before %s is out (data older "
            "than the watermark minus grace: a replay into live topics, a host far behind; "
            "or, right after a worker was killed, partials of a batch it had sent and not "
            "yet recorded, sent again: the closed window already held those)",
            self._late_unlogged, part.host, part.tenant, utc_text(part.window_start),
            utc_text(ps.out_before),
        )  # fmt: skip
        self._late_logged_at, self._late_unlogged = now, 0

    def _on_source(self, wm: codec.SourceWatermark, ps: PartitionState) -> None:
        ps.note_source(wm.source, wm.ts)
        self.newest_source_ts = max(self.newest_source_ts, wm.ts)

    def watermark(self, ps: PartitionState) -> float:
        """Event time up to which every samples partition has been forwarded, minus grace
        (see :meth:`PartitionState.watermark`)."""
        return ps.watermark(sources=self.sources, grace_s=self.cfg.grace_s)

    def _on_job(
        self, ev: schema.JobEvent, ps: PartitionState, batch: _Batch, record_ts: Any = None
    ) -> None:
        """Apply a job event; it moves the partition's job event time only up to its
        record's time (``record_ts``, when known): a scheduler whose clock runs ahead
        (within ``max_clock_skew_s``) does not make the others' events late."""
        index = self._job_index(batch, ps)
        book = index.books.get(ev.tenant) or job_book.TenantJobs(self.cfg.book_shards)
        limit = self.cfg.max_state_bytes
        forgotten, fits = book.make_room(ev.job, limit)
        self._stage_jobs(index, ev.tenant, book, forgotten, batch=batch)
        if not fits:
            raise StateFull(
                f"job book shard of {ev.tenant!r} holds too many jobs for {limit} bytes "
                f"(job {ev.job!r}); raise worker.job_book_shards or worker.max_state_bytes"
            )
        level = None
        if self.level_of is not None and ev.event in ("submit", "start"):
            level = self.level_of(ev)
        if ev.ts < ps.out_before:  # its window is out: the book still takes it
            self.stats.late_job_events += 1
        reached = ev.ts
        if isinstance(record_ts, (int, float)) and 0 < record_ts < reached:
            reached = float(record_ts)
        ps.note_job(ev.tenant, reached)
        index.books[ev.tenant] = book
        changed = book.apply(ev, level=level)
        if changed is not None:
            self._stage_jobs(index, ev.tenant, book, (changed,), batch=batch)

    def _job_index(self, batch: _Batch, ps: PartitionState | None = None) -> _JobIndex:
        """The job books of ``batch``'s partition, read from the table again unless the
        last writes of them there were this instance's own (another worker held the
        partition since, or this instance has not read them yet)."""
        index = self._jobs.get(batch.partition)
        if index is not None and index.batch is batch:
            return index
        token = batch.get(_tkey(batch.partition))
        if index is None or index.token != token:
            index = self._load_jobs(batch, ps or self._load_partition(batch), token)
            self._jobs[batch.partition] = index
        if index.batch is not batch:
            index.batch, index.stamped = batch, False
        return index

    def _load_jobs(self, batch: _Batch, ps: PartitionState, token: Any) -> _JobIndex:
        """Index the stored job books of ``ps``'s tenants: one pass over the table's keys
        (after a restart or a rebalance), whole books of older workers moved job by job,
        what the windows closed so far used dropped (a job's value keeps it until the
        job's next write, see :meth:`job_book.TenantJobs.prune`)."""
        index = _JobIndex(token)
        tenants = ps.job_tenants
        if not tenants:
            return index
        prefixes = {_bprefix(t): t for t in tenants}
        entries: dict[str, dict[str, Any]] = {t: {} for t in tenants}
        for key in list(self.table.data.keys()):
            if key.startswith(b"jb|") and (t := prefixes.get(key[:-16])) is not None:
                value = batch.get(key)
                if value is not None:
                    entries[t][key[-16:].decode()] = value
        n = self.cfg.book_shards
        for t in tenants:
            legacy = {k: v for k in range(n) if (v := batch.get(_jkey(t, k))) is not None}
            book, moved, emptied = job_book.TenantJobs.from_stored(
                n, entries[t], legacy, pruned_before=ps.closed_end
            )
            index.books[t] = book
            self._stage_jobs(index, t, book, moved, emptied, batch=batch)
        return index

    def _stage_jobs(
        self,
        index: _JobIndex,
        tenant: str,
        book: job_book.TenantJobs,
        jobs: Sequence[str],
        legacy: Sequence[int] = (),
        *,
        batch: _Batch,
    ) -> None:
        """Put the changed values of ``tenant``'s book into the batch (``None``: delete),
        and this instance's token with the first of a batch."""
        if not jobs and not legacy:
            return
        for job in jobs:
            batch.set(_bkey(tenant, job), book.stored(job))
        for k in legacy:
            batch.set(_jkey(tenant, k), book.legacy_stored(k))
        if not index.stamped or index.batch is not batch:
            self._writes += 1
            index.token = f"{self._instance}:{self._writes}"
            index.batch, index.stamped = batch, True
            batch.set(_tkey(batch.partition), index.token)

    def _job_book(self, tenant: str, batch: _Batch) -> job_book.TenantJobs | None:
        """``tenant``'s job book (read-only), or ``None`` without any job event."""
        return self._job_index(batch).books.get(tenant)

    def _job_tenants_at(self, ps: PartitionState, batch: _Batch, start: float) -> set[str]:
        """Tenants whose job books have something to say about the window at ``start``."""
        end = start + self.cfg.window_s
        books = self._job_index(batch, ps).books
        return {t for t, book in books.items() if book.has_jobs_at(start, end)}

    def _job_starts(
        self, ps: PartitionState, batch: _Batch, watermark: float
    ) -> dict[float, set[str]]:
        """Starts of the windows that end at or before ``watermark``, are not out yet and
        have a tenant whose job book has something to say about them, with those
        tenants: a tenant with jobs queued or running gets its windows even when no host
        of its partition sends telemetry for them, those of the last ``job_fill_s``
        before ``watermark``. Every window before ``watermark`` that is not out and
        after the first time a book speaks of is a key (no tenant: an empty set)."""
        w = self.cfg.window_s
        if not math.isfinite(watermark) or math.floor(watermark / w) * w <= ps.out_before:
            return {}  # no window end passed since the last close: nothing to read
        if not ps.job_tenants:
            return {}
        books = self._job_index(batch, ps).books
        first = min(
            (t for book in books.values() if (t := book.first_ts()) is not None), default=None
        )
        if first is None:
            return {}
        oldest = math.floor((watermark - self.cfg.job_fill_s) / w) * w  # a jump: not filled
        base = max(ps.out_before, math.floor(first / w) * w, oldest)
        count = max(0, math.floor((watermark - base) / w))
        spoken = _spoken_of(books, base, w, count)
        return {base + i * w: spoken.get(i, set()) for i in range(count)}

    def _prune_jobs(self, ps: PartitionState, batch: _Batch, before: float) -> None:
        """The job books drop what every window ending at or before ``before`` used; a
        tenant whose book is left empty (its last job removed ``forget_after_s`` ago) leaves
        the index, so tenants that come and go do not pile up in memory or in the table."""
        index = self._job_index(batch, ps)
        for t, book in list(index.books.items()):
            jobs, legacy = book.prune(before)
            self._stage_jobs(index, t, book, jobs, legacy, batch=batch)
            if book.empty:
                del index.books[t]
                ps.forget_job_tenant(t)

    def _window_state(self, tenant: str, start: float, batch: _Batch) -> Any:
        """``tenant``'s window at ``start``, its shards merged (read-only)."""
        state = initial(tenant, start)
        for k in range(max(batch.host_counts)):
            shard = batch.get(_wkey(tenant, start, k))
            if shard is not None:
                state = merge(state, shard)
        return state

    async def _write_partition(self, ps: PartitionState, batch: _Batch) -> None:
        for key in self._stage_partition(ps, batch):
            await batch.store(key)

    async def _close_ready(self, ps: PartitionState, batch: _Batch) -> None:
        w = self.cfg.window_s
        watermark = self.watermark(ps)
        closable_at = time.monotonic()  # when this worker could close them: one clock
        starts = set(ps.ready_starts(watermark=watermark, window_s=w))
        by_jobs = self._job_starts(ps, batch, watermark)
        starts.update(start for start, tenants in by_jobs.items() if tenants)
        for start in sorted(starts):
            job_tenants = by_jobs.get(start)
            if job_tenants is None:  # before the windows the books were read for
                job_tenants = self._job_tenants_at(ps, batch, start)
            tenants = ps.tenants_open_at(start) | job_tenants
            sent = [await self._emit(tenant, start, batch) for tenant in sorted(tenants)]
            forwarded = []
            for fut, window in sent:  # delivered before the state that made them goes away
                await fut
                self.stats.windows_emitted += 1
                self.stats.observe_delay(time.monotonic() - closable_at)
                if self.on_window is not None:
                    forwarded.append(await self.on_window(window))
            for fut in forwarded:
                await fut
            ps.close(start, end=start + w)
            await self._write_partition(ps, batch)
            for tenant in sorted(tenants):
                for k in range(max(batch.host_counts)):
                    if batch.get(_wkey(tenant, start, k)) is not None:
                        await batch.delete(_wkey(tenant, start, k))
            self._prune_jobs(ps, batch, start + w)
        # Every window ending at or before the watermark is out: say so, after them. From
        # now on a partial for such a window is late, so the report stays true.
        upto = math.floor(watermark / w) * w if math.isfinite(watermark) else -math.inf
        if ps.report(upto):
            await self._write_partition(ps, batch)
            if self.on_progress is not None:
                await self.on_progress(batch.partition, upto)

    async def _emit(
        self, tenant: str, start: float, batch: _Batch
    ) -> tuple[Any, schema.TenantWindow]:
        """Send one closed window; returns (delivery future, window)."""
        state = self._window_state(tenant, start, batch)
        book = self._job_book(tenant, batch)
        if book is None:
            window = result(state, self.cfg)
        else:
            end = start + self.cfg.window_s
            active = book.active_at(end)
            flow_cfg = self.cfg.flow
            window = result(
                state,
                self.cfg,
                pending_gpus=float(sum(j.gpus for j in active if j.start_ts is None)),
                scheduled_running_gpus=float(sum(j.gpus for j in active if j.start_ts is not None)),
                pending_effective_gpus=pending_effective_gpus(
                    active, self.cfg.levels, flow_cfg.unknown_level
                ),
                flow=job_flow(active, book.events_in(start, end), end=end, settings=flow_cfg),
            )
        fut = await self.features.send(key=tenant.encode(), value=schema.encode(window))
        return fut, window
