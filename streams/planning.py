"""Forecast-and-plan stage: closed TenantWindows -> forecaster + planner -> ScalingEvents.

What the scheduler reports on ``dprobe.cluster`` (capacity, quotas) is validated by the
worker that reads it and forwarded to the planning topic too, so it reaches the plan loop
in one order with the windows, is journaled and checkpointed with them, and a replay of
the planning topic applies it at the same point.

The window stage forwards every TenantWindow it emits to the single-partition internal
topic ``<app_id>-planning``, so exactly one worker of the group plans for all tenants.
After its windows, each window partition forwards its progress (every window ending at
or before a time is out). This stage feeds both to
:class:`~dprobe.models.plan_loop.PlanLoop`, produces the events of any plan a progress
record completes to ``dprobe.scaling-events`` (key = tenant) and awaits their delivery
before the record is acknowledged (so before its offset is committed);
then, after each plan, it checkpoints the loop (forecaster, planner history, quotas) to
``<data_dir>/plan-loop.ckpt``, so a restarted worker resumes warm and re-emits identical
events (same ``event_id``) for anything it replays. Records that arrive between two
plans (windows waiting for their end to be planned, progress) are appended to
``plan-loop.ckpt.journal`` before they are acknowledged, and taken back on restart.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from dprobe import schema
from dprobe.models.checkpoint import CheckpointError
from dprobe.models.plan_loop import PlanLoop
from dprobe.sinks.worker_stats import TenantView, WorkerStats
from dprobe.streams import codec

log = logging.getLogger(__name__)


class Planning:
    """The per-record logic of the planning agent; faust objects are injected."""

    def __init__(
        self, *, loop: PlanLoop, events_topic: Any, stats: WorkerStats, checkpoint: Path
    ) -> None:
        self.loop = loop
        self.events = events_topic
        self.stats = stats
        self.checkpoint = checkpoint
        self.journal = checkpoint.with_name(checkpoint.name + ".journal")
        try:
            if loop.load(checkpoint):
                log.info("forecaster and planner resumed from %s", checkpoint)
                if loop.settings_changed:
                    log.warning(
                        "settings changed since %s was saved (%s): the settings win; quotas "
                        "start again from them and from the scheduler's next report",
                        checkpoint,
                        loop.settings_changed,
                    )
        except CheckpointError as exc:
            log.warning("%s: starting with a fresh forecaster and planner", exc)
        self._replay_journal()
        self._refresh_views()

    def _replay_journal(self) -> None:
        """Take back what arrived after the last checkpoint (its offsets may be committed):
        windows waiting for their end to be planned, and partitions' progress."""
        if not self.journal.exists():
            return
        n = 0
        for line in self.journal.read_bytes().splitlines():
            try:
                message = codec.decode_planning(line)
            except (schema.SchemaError, ValueError):  # a line cut short by a crash
                continue
            if isinstance(message, codec.WindowProgress):
                self.loop.note_progress(message.partition, message.upto)
            elif isinstance(message, schema.ClusterReport):
                self.loop.on_cluster(message)
            else:
                self.loop.on_window(message)
            n += 1
        log.info("planning: %d records taken back from %s", n, self.journal)

    async def on_message(self, raw: bytes) -> None:
        """One record of the planning topic: a closed window, or a window partition's
        progress (which may complete plans). Journaled first: the offset of a record is
        committed long before a checkpoint covers it."""
        message = codec.decode_planning(raw)
        self.journal.parent.mkdir(parents=True, exist_ok=True)
        with self.journal.open("ab") as f:
            f.write(raw + b"\n")
        if isinstance(message, codec.WindowProgress):
            await self._plan(message)
        elif isinstance(message, schema.ClusterReport):
            self.loop.on_cluster(message)
            self.stats.cluster_reports += 1
            log.info(
                "cluster report from %s: capacity %s GPUs, %d quota(s)%s; plans use them "
                "from the next window end",
                message.source,
                "unchanged" if message.capacity_gpus is None else f"{message.capacity_gpus:g}",
                len(message.quotas),
                " (complete: unlisted tenants hold none)" if message.complete else "",
            )
            self._refresh_views()
        else:  # a window waits for its end to be planned: no view changes before that
            self.loop.on_window(message)

    async def _plan(self, progress: codec.WindowProgress) -> None:
        before = self.loop.planned_upto
        events = self.loop.on_progress(progress.partition, progress.upto)
        futures = [
            await self.events.send(key=ev.tenant.encode(), value=schema.encode(ev)) for ev in events
        ]
        for fut, ev in zip(futures, events, strict=True):
            await fut
            self.stats.scaling_events[ev.action] += 1
        if self.loop.planned_upto != before:
            self.loop.save(self.checkpoint)
            self.journal.unlink(missing_ok=True)  # the checkpoint covers all of it
        self._refresh_views()

    def _refresh_views(self) -> None:
        """Mirror the loop's per-tenant view into the stats the exporter reads."""
        views = self.loop.tenants()
        self.stats.capacity_gpus = float(self.loop.capacity_gpus)
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
