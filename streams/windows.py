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

- ``w|TENANT|START``: the window state of :mod:`dprobe.models.window_agg`;
- ``j|TENANT``: the tenant's job book (:mod:`dprobe.models.job_book`);
- ``p|PARTITION``: ``{"max_ts", "closed_end", "open": {tenant: [starts]}, "job_tenants",
  "sources": {samples partition: progress}}``.

Commit order (written down once, relied on for exactly-once *effects*): on close, every
TenantWindow of that window start is produced and its delivery awaited; then the
partition state (closed_end, open index) is written; then the window states are
deleted. A crash before the partition state is written re-emits identical windows on
replay (same state, same inputs); after it, replayed partials of those windows are late.
Faust flushes the producer (changelog included) before committing source offsets.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from dprobe import schema
from dprobe.models import job_book
from dprobe.models.window_agg import Partial, WindowSettings, add, initial, result
from dprobe.streams import codec
from dprobe.streams.stats import WorkerStats

log = logging.getLogger(__name__)


def _wkey(tenant: str, start: float) -> bytes:
    return f"w|{tenant}|{start!r}".encode()


def _jkey(tenant: str) -> bytes:
    return f"j|{tenant}".encode()


def _pkey(partition: int) -> bytes:
    return f"p|{partition}".encode()


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
        on_window: Any = None,
    ) -> None:
        self.table = table
        self.features = features_topic
        self.cfg = window
        self.stats = stats
        self.sources = sources
        self.on_window = on_window
        self.newest_source_ts = 0.0  # highest progress any samples partition reported here

    def _pstate(self, partition: int) -> dict[str, Any]:
        return codec.loads(self.table.get(_pkey(partition))) or {
            "max_ts": 0.0,
            "closed_end": 0.0,
            "open": {},
            "job_tenants": [],
            "sources": {},
        }

    async def on_update(self, raw: bytes, partition: int) -> None:
        update = codec.decode_update(raw)
        ps = self._pstate(partition)
        if isinstance(update, Partial):
            self._on_partial(update, ps)
        elif isinstance(update, codec.SourceWatermark):
            self._on_source(update, ps)
        else:
            self._on_job(update, ps)
        self.table[_pkey(partition)] = codec.dumps(ps)
        await self._close_ready(partition, ps)

    def _on_partial(self, part: Partial, ps: dict[str, Any]) -> None:
        if part.window_start + self.cfg.window_s <= ps["closed_end"]:
            self.stats.late_partials += 1
            return
        key = _wkey(part.tenant, part.window_start)
        state = codec.loads(self.table.get(key)) or initial(part.tenant, part.window_start)
        new = add(state, part)
        if new is not state:
            self.table[key] = codec.dumps(new)
            starts = ps["open"].setdefault(part.tenant, [])
            if part.window_start not in starts:
                starts.append(part.window_start)
        ps["max_ts"] = max(ps["max_ts"], part.ts)

    def _on_source(self, wm: codec.SourceWatermark, ps: dict[str, Any]) -> None:
        key = str(wm.source)
        ps["sources"][key] = max(ps["sources"].get(key, 0.0), wm.ts)
        self.newest_source_ts = max(self.newest_source_ts, wm.ts)
        ps["max_ts"] = max(ps["max_ts"], wm.ts)

    def watermark(self, ps: dict[str, Any]) -> float:
        """Event time up to which every samples partition has been forwarded, minus grace."""
        known = ps["sources"]
        if not known:
            return ps["max_ts"] - self.cfg.grace_s
        if len(known) < self.sources:
            return float("-inf")
        return min(known.values()) - self.cfg.grace_s

    def _on_job(self, ev: schema.JobEvent, ps: dict[str, Any]) -> None:
        key = _jkey(ev.tenant)
        book = codec.loads(self.table.get(key)) or job_book.initial()
        self.table[key] = codec.dumps(job_book.apply(book, ev))
        if ev.tenant not in ps["job_tenants"]:
            ps["job_tenants"] = sorted([*ps["job_tenants"], ev.tenant])
        ps["max_ts"] = max(ps["max_ts"], ev.ts)

    async def _close_ready(self, partition: int, ps: dict[str, Any]) -> None:
        w = self.cfg.window_s
        watermark = self.watermark(ps)
        starts = sorted({s for lst in ps["open"].values() for s in lst if s + w <= watermark})
        for start in starts:
            tenants = {t for t, lst in ps["open"].items() if start in lst}
            for t in ps["job_tenants"]:
                if t not in tenants:
                    pending, running = job_book.totals(
                        codec.loads(self.table.get(_jkey(t))) or job_book.initial()
                    )
                    if pending or running:
                        tenants.add(t)
            sent = [await self._emit(tenant, start) for tenant in sorted(tenants)]
            for fut, window in sent:  # delivered before the state that made them goes away
                await fut
                self.stats.windows_emitted += 1
                self.stats.observe_delay(time.time() - window.window_end)
                if self.on_window is not None:
                    await self.on_window(window)
            ps["closed_end"] = max(ps["closed_end"], start + w)
            for t in list(ps["open"]):
                ps["open"][t] = [s for s in ps["open"][t] if s != start]
                if not ps["open"][t]:
                    del ps["open"][t]
            self.table[_pkey(partition)] = codec.dumps(ps)
            for tenant in sorted(tenants):
                key = _wkey(tenant, start)
                if key in self.table:
                    del self.table[key]

    async def _emit(self, tenant: str, start: float) -> tuple[Any, schema.TenantWindow]:
        """Send one closed window; returns (delivery future, window)."""
        state = codec.loads(self.table.get(_wkey(tenant, start))) or initial(tenant, start)
        book = codec.loads(self.table.get(_jkey(tenant))) or job_book.initial()
        pending, running = job_book.totals(book)
        window = result(state, self.cfg, pending_gpus=pending, scheduled_running_gpus=running)
        fut = await self.features.send(key=tenant.encode(), value=schema.encode(window))
        return fut, window
