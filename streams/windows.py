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

Table layout (one changelog-backed table, values are msgspec JSON):

- ``w|TENANT|START``: the window state of :mod:`dprobe.streams.state.window_agg`;
- ``j|TENANT``: the tenant's job book (:mod:`dprobe.streams.state.job_book`), each job
  with the level the injected ``level_of`` predicts for it when it is first seen;
- ``p|PARTITION``: the partition's :class:`~dprobe.streams.state.partition.PartitionState`
  (watermark sources, open windows, closed and reported progress) in its stored form;
  ``upto`` is the progress last reported to the planning stage (every window ending at
  or before it is out; a partial for such a window is late).

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

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from dprobe import schema
from dprobe.models.job_flow import job_flow, pending_effective_gpus
from dprobe.models.levels import Level
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec, table_io
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.state import job_book
from dprobe.streams.state.partition import PartitionState
from dprobe.streams.state.window_agg import Partial, WindowSettings, add, initial, result


def _wkey(tenant: str, start: float) -> bytes:
    return f"w|{tenant}|{start!r}".encode()


def _jkey(tenant: str) -> bytes:
    return f"j|{tenant}".encode()


def _pkey(partition: int) -> bytes:
    return f"p|{partition}".encode()


class _Batch:
    """The table values one partition's batch reads and writes, decoded once."""

    def __init__(self, table: Any, partition: int) -> None:
        self.table = table
        self.partition = partition
        self.values: dict[bytes, Any] = {}
        self.dirty: set[bytes] = set()

    def get(self, key: bytes) -> Any:
        if key not in self.values:
            self.values[key] = codec.loads(self.table.get(key))
        return self.values[key]

    def set(self, key: bytes, value: Any) -> None:
        self.values[key] = value
        self.dirty.add(key)

    async def write(self, key: bytes) -> None:
        """Write one value now (and no more at the end of the batch)."""
        await table_io.put(self.table, self.partition, key, codec.dumps(self.values[key]))
        self.dirty.discard(key)

    async def delete(self, key: bytes) -> None:
        self.values[key] = None
        self.dirty.discard(key)
        await table_io.delete(self.table, self.partition, key)

    async def flush(self) -> None:
        for key in sorted(self.dirty):
            await self.write(key)


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

    async def on_updates(self, events: Sequence[Any]) -> None:
        """Apply one batch of tenant-updates records (faust events, in read order)."""
        by_partition: dict[int, list[Any]] = {}
        for event in events:
            by_partition.setdefault(event.message.partition, []).append(event)
        for partition, evs in sorted(by_partition.items()):
            batch = _Batch(self.table, partition)
            ps = PartitionState.from_plain(batch.get(_pkey(partition)))
            for event in evs:
                await self._apply(event, ps, batch)
            batch.set(_pkey(partition), ps.to_plain())
            await batch.flush()

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
                self._on_job(update, ps, batch)
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
            return
        key = _wkey(part.tenant, part.window_start)
        state = batch.get(key) or initial(part.tenant, part.window_start)
        new = add(state, part)
        if new is not state:
            batch.set(key, new)
            ps.open_window(part.tenant, part.window_start)

    def _on_source(self, wm: codec.SourceWatermark, ps: PartitionState) -> None:
        ps.note_source(wm.source, wm.ts)
        self.newest_source_ts = max(self.newest_source_ts, wm.ts)

    def watermark(self, ps: PartitionState) -> float:
        """Event time up to which every samples partition has been forwarded, minus grace
        (see :meth:`PartitionState.watermark`)."""
        return ps.watermark(sources=self.sources, grace_s=self.cfg.grace_s)

    def _on_job(self, ev: schema.JobEvent, ps: PartitionState, batch: _Batch) -> None:
        key = _jkey(ev.tenant)
        level = None
        if self.level_of is not None and ev.event in ("submit", "start"):
            level = self.level_of(ev)
        batch.set(key, job_book.apply(batch.get(key) or job_book.initial(), ev, level=level))
        ps.note_job(ev.tenant, ev.ts)

    async def _write_partition(self, ps: PartitionState, batch: _Batch) -> None:
        key = _pkey(batch.partition)
        batch.set(key, ps.to_plain())
        await batch.write(key)

    async def _close_ready(self, ps: PartitionState, batch: _Batch) -> None:
        w = self.cfg.window_s
        watermark = self.watermark(ps)
        for start in ps.ready_starts(watermark=watermark, window_s=w):
            tenants = ps.tenants_open_at(start)
            for t in ps.job_tenants:
                if t not in tenants:
                    book = batch.get(_jkey(t)) or job_book.initial()
                    if job_book.has_jobs_at(book, start, start + w):
                        tenants.add(t)
            sent = [await self._emit(tenant, start, batch) for tenant in sorted(tenants)]
            forwarded = []
            for fut, window in sent:  # delivered before the state that made them goes away
                await fut
                self.stats.windows_emitted += 1
                self.stats.observe_delay(time.time() - window.window_end)
                if self.on_window is not None:
                    forwarded.append(await self.on_window(window))
            for fut in forwarded:
                await fut
            ps.close(start, end=start + w)
            await self._write_partition(ps, batch)
            for tenant in sorted(tenants):
                await batch.delete(_wkey(tenant, start))
            for t in ps.job_tenants:
                book = batch.get(_jkey(t))
                if book is not None:
                    pruned = job_book.prune(book, start + w)
                    if pruned is not book:
                        batch.set(_jkey(t), pruned)
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
        state = batch.get(_wkey(tenant, start)) or initial(tenant, start)
        book = batch.get(_jkey(tenant))
        if book is None:
            window = result(state, self.cfg)
        else:
            end = start + self.cfg.window_s
            active = job_book.active_at(book, end)
            flow_cfg = self.cfg.flow
            window = result(
                state,
                self.cfg,
                pending_gpus=float(sum(j.gpus for j in active if j.start_ts is None)),
                scheduled_running_gpus=float(sum(j.gpus for j in active if j.start_ts is not None)),
                pending_effective_gpus=pending_effective_gpus(
                    active, self.cfg.levels, flow_cfg.unknown_level
                ),
                flow=job_flow(
                    active, job_book.events_in(book, start, end), end=end, settings=flow_cfg
                ),
            )
        fut = await self.features.send(key=tenant.encode(), value=schema.encode(window))
        return fut, window
