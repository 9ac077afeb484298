"""Forecast-and-plan stage: closed TenantWindows -> forecaster + planner -> ScalingEvents.

The window stage forwards every TenantWindow it emits to the single-partition internal
topic ``<app_id>-planning``, so exactly one worker of the group plans for all tenants.
After its windows, each window partition forwards its progress (every window ending at
or before a time is out). What the scheduler reports on ``dprobe.cluster`` (capacity,
quotas) is validated by the worker that reads it and forwarded to the planning topic too,
so it reaches the plan loop in one order with the windows.

This stage feeds them to a :class:`~dprobe.streams.plan_order.PlanOrder` (which plans each
window end once every window partition has passed it). For each record, in this order:

1. it is journaled in the ``planning`` table (:mod:`dprobe.streams.planning_store`);
2. the events of any plan it completes are produced to ``dprobe.scaling-events``
   (key = tenant) in one Kafka transaction, and its commit awaited
   (:mod:`dprobe.streams.event_fence`: the owner that takes planning over fences every
   earlier one, so a former owner that wakes up from a stall sends nothing more);
3. after a plan, at most every ``checkpoint_s`` seconds (``worker.planning_checkpoint_s``),
   the loop's whole state (forecaster, calibration, damping history, quotas, windows
   waiting) is checkpointed into the table, replacing the journal it covers;

all delivered before the record is acknowledged, so before its offset is committed. The
table's changelog is a compacted Kafka topic: the worker that is assigned the planning
partition next (after a rebalance, a crash, a rolling upgrade) rebuilds the table, loads
the checkpoint, skips the records it covers, and runs the journal through the loop again
(plans included: the loop is deterministic, and their events were delivered before the
journal's records were acknowledged, so they are not sent again), then goes on exactly
where the last owner stopped; the events it re-emits for records read again carry the
same ``event_id`` (consumers drop them).

A worker upgraded from a version that kept this state in local files
(``<data_dir>/plan-loop.ckpt`` and its ``.journal``) starts from them once, while the
table holds no checkpoint yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec

from dprobe import schema
from dprobe.models.checkpoint import CheckpointError, load_state, state_bytes, state_of
from dprobe.sinks.worker_stats import TenantView, WorkerStats
from dprobe.streams import codec
from dprobe.streams.delivery import DeliveryFailed
from dprobe.streams.plan_order import PlanFailed, PlanOrder
from dprobe.streams.planning_store import Head, PlanningStore

log = logging.getLogger(__name__)


class Planning:
    """The per-record logic of the planning agent; faust objects are injected.

    ``make_order`` builds a fresh plan order (forecaster, planner, settings): the state
    in the store, if any, is loaded into it at the first record after each assignment.
    """

    def __init__(
        self,
        *,
        make_order: Callable[[], PlanOrder],
        store: PlanningStore,
        events: Any,
        stats: WorkerStats,
        legacy_checkpoint: Path | None = None,
        checkpoint_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.make_order = make_order
        self.checkpoint_s = checkpoint_s
        self.clock = clock
        self._checkpointed_at = -math.inf
        self.order = make_order()
        self.store = store
        self.events = events  # FencedEvents: claim(), release(), send_all()
        self.stats = stats
        self.legacy = legacy_checkpoint
        self._restored = False
        self._covered = -1  # offsets up to this one are in the checkpoint loaded
        self._last: int | None = None  # the last record this worker's loop took
        self._head: Head | None = None  # the checkpoint in force when it took it
        self._refresh_views()

    @property
    def loop(self) -> Any:
        """The plan loop (forecaster + planner) of the current order."""
        return self.order.loop

    def revoke(self) -> None:
        """A rebalance began: at the next record the state is loaded again from the table
        (faust keeps the table current while the partition stays on this worker, and
        rebuilds it from the changelog when it comes back), unless this worker's loop is
        still that state (:meth:`_current`). The event producer is started afresh too:
        a worker that stalled may have lost planning and got it back in one rebalance it
        saw, and its producer was fenced by the owner in between."""
        self._restored = False
        self.events.release()

    def released(self) -> None:
        """The planning partition is another worker's now: drop this worker's copy of its
        state and its tenant views."""
        self._restored = False
        self._last = self._head = None
        self.events.release()
        self.store.forget_local()
        self.order = self.make_order()
        self._refresh_views()

    async def on_message(self, raw: bytes, offset: int) -> None:
        """One record of the planning topic at ``offset``: a closed window, a window
        partition's progress (which may complete plans), or a cluster report."""
        if not self._restored:
            async with _delivering("planning's event producer (fencing earlier owners)", offset):
                await self.events.claim()
            if self._current(offset):
                self._restored = True  # a rebalance left planning here: nothing to load
            else:
                self._restore(offset)
        self._last = offset
        if offset <= self._covered:
            return  # the checkpoint already holds it
        message = codec.decode_planning(raw)  # invalid: a dead letter, never journaled
        async with _delivering("its journal entry", offset):
            await self.store.journal(offset, raw)
        before = self.loop.planned_upto
        non_finite = self.loop.non_finite_forecasts
        forgotten = self.loop.forgotten_tenants
        failure: PlanFailed | None = None
        try:
            events = self._step(message)
        except PlanFailed as exc:  # the ends that were planned still send their events
            events, failure = exc.events, exc
        self.stats.non_finite_forecasts += self.loop.non_finite_forecasts - non_finite
        self.stats.forgotten_tenants += self.loop.forgotten_tenants - forgotten
        async with _delivering(f"{len(events)} scaling event(s)", offset):
            await self.events.send_all([(ev.tenant.encode(), schema.encode(ev)) for ev in events])
        for ev in events:
            self.stats.scaling_events[ev.action] += 1
        if failure is not None:
            self._refresh_views()
            raise failure  # the record is a dead letter (processing_error); the journal keeps it
        planned = self.loop.planned_upto != before
        if planned and self.clock() - self._checkpointed_at >= self.checkpoint_s:
            blob = state_bytes(self.order.state_dict())
            async with _delivering("a checkpoint", offset):
                await self.store.checkpoint(offset, blob)
            self._head = self.store.head()
            self._checkpointed_at = self.clock()
            self._retire_legacy()
        if isinstance(message, schema.ClusterReport):
            self.stats.cluster_reports += 1
            log.info(
                "cluster report from %s: capacity %s, %d quota(s)%s; plans use them "
                "from the next window end",
                message.source,
                "unchanged" if message.capacity_gpus is None else f"{message.capacity_gpus:g} GPUs",
                len(message.quotas),
                " (complete: unlisted tenants hold none)" if message.complete else "",
            )
        if planned or isinstance(message, schema.ClusterReport):
            self._refresh_views()  # a window alone changes no view before its end is planned

    def _step(self, message: Any) -> list[Any]:
        """Apply one decoded planning record; the events of the plans it completes."""
        if isinstance(message, codec.WindowProgress):
            return self.order.on_progress(message.partition, message.upto)
        if isinstance(message, schema.ClusterReport):
            self.loop.on_cluster(message)
        elif isinstance(message, codec.WorkerStarted):
            pass  # for workers that join later (streams/group_window.py), not for plans
        else:  # a window waits for its end to be planned
            self.order.on_window(message)
        return []

    # -- restoring ----------------------------------------------------------------------
    def _current(self, first: int) -> bool:
        """Whether this worker's loop already is the state the table holds before record
        ``first``: it took every record up to the one before ``first`` itself, and the
        checkpoint in force is still the one it last wrote or loaded (no other worker
        planned in between). A rebalance that leaves planning on this worker then costs
        no reload of the checkpoint and no replay of the journal."""
        if self._last is None or first != self._last + 1:
            return False
        try:
            return self.store.head() == self._head
        except CheckpointError:
            return False

    def _restore(self, first: int) -> None:
        """Load the state the last owner left (the table was rebuilt from its changelog
        before records flow), then take back its journal up to record ``first``."""
        self._restored = True
        self.order = self.make_order()
        self._covered = -1
        self._last = self._head = None
        self._checkpointed_at = -math.inf  # the first plan shortens the journal left
        try:
            head = self._head = self.store.head()
            if head is not None:
                self._load(state_of(self.store.load(head), "planning table"), "the planning table")
                self._covered = head.offset
            elif self.legacy is not None and self.legacy.exists():
                self._restore_legacy(self.legacy)  # then the table's journal since the upgrade
        except CheckpointError as exc:
            log.warning("%s: starting with a fresh forecaster and planner", exc)
            self.order = self.make_order()
        n = 0
        for at, raw in self.store.journal_between(self._covered, first):
            try:  # its plans' events were delivered: they are not sent again
                self._step(codec.decode_planning(raw))
            except Exception:  # it failed the same way when it came in
                log.exception("planning: journaled record at offset %d fails again; skipped", at)
            n += 1
        log.info(
            "planning: resumed %s, %d record(s) taken back from the journal, from offset %d",
            "from a checkpoint" if self._covered >= 0 else "fresh", n, first,
        )  # fmt: skip
        self._refresh_views()

    def _load(self, state: dict[str, Any], where: str) -> None:
        fresh = self.order.state_dict()
        try:
            self.order.load_state_dict(state)
        except (
            KeyError,
            TypeError,
            ValueError,
            RuntimeError,
            IndexError,
            msgspec.ValidationError,
        ) as exc:
            self.order.load_state_dict(fresh)
            raise CheckpointError(
                f"{where}: the checkpoint does not fit this forecaster or its settings ({exc})"
            ) from exc
        log.info("forecaster and planner resumed from %s", where)
        if self.loop.settings_changed:
            log.warning(
                "settings changed since %s was saved (%s): the settings win; new cluster "
                "settings restart the quotas from them and from the scheduler's next "
                "report, a new model starts learning afresh",
                where,
                self.loop.settings_changed,
            )

    def _take_back(self, raw: bytes) -> None:
        """Re-apply one record of an older worker's local journal (windows, progress and
        reports that arrived since its last plan) without planning."""
        try:
            message = codec.decode_planning(raw)
        except (schema.SchemaError, ValueError, msgspec.DecodeError):  # a line cut short
            return
        if isinstance(message, codec.WindowProgress):
            self.order.note_progress(message.partition, message.upto)
        elif isinstance(message, schema.ClusterReport):
            self.loop.on_cluster(message)
        elif not isinstance(message, codec.WorkerStarted):
            self.order.on_window(message)

    def _restore_legacy(self, path: Path) -> None:
        """Start from the local files an older worker kept (until the first checkpoint in
        the table; the records since the upgrade are in the table's journal)."""
        try:
            self._load(load_state(path), str(path))
        except (CheckpointError, OSError) as exc:
            log.warning("%s: starting with a fresh forecaster and planner", exc)
            self.order = self.make_order()
        journal = path.with_name(path.name + ".journal")
        if journal.exists():
            for line in journal.read_bytes().splitlines():
                self._take_back(line)
        log.info("planning: resumed from %s (moved into the planning table at the next plan)", path)

    def _retire_legacy(self) -> None:
        """The table holds a checkpoint now: the local files are not read again."""
        if self.legacy is None or not self.legacy.exists():
            return
        self.legacy.replace(self.legacy.with_name(self.legacy.name + ".migrated"))
        self.legacy.with_name(self.legacy.name + ".journal").unlink(missing_ok=True)

    def _refresh_views(self) -> None:
        """Mirror the loop's per-tenant view into the stats the exporter reads."""
        views = self.loop.tenants()
        # only the worker that plans exports the capacity (None: another worker plans, or
        # none has yet); a rebalance under way that may leave planning here (revoked, the
        # loop it took records with kept) does not take it away
        plans = self._restored or self._last is not None
        self.stats.capacity_gpus = float(self.loop.capacity_gpus) if plans else None
        self.stats.tenants = {
            t: TenantView(
                demand_gpus=v.demand_gpus,
                effective_demand_gpus=v.effective_demand_gpus,
                level_counts=v.level_counts,
                window_end=v.window_end,
                forecast=v.forecast,
                quota_gpus=v.quota_gpus,
                abs_error=v.abs_error,
            )
            for t, v in views.items()
        }


@contextlib.asynccontextmanager
async def _delivering(what: str, offset: int) -> AsyncIterator[None]:
    """Turn a failed delivery into :class:`DeliveryFailed` (the record stays unacknowledged)."""
    try:
        yield
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise DeliveryFailed(f"planning record at offset {offset}: {what} not delivered") from exc
