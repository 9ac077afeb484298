"""Which window ends are ready to plan, whatever order the window partitions deliver in.

The windows of different tenants are closed by different window partitions, which can be
far apart (a backlog after an outage, a rebalance). :class:`PlanOrder` holds each window
until its end is ready: every one of the ``partitions`` window partitions has reported,
through a progress record, that it emitted all its windows ending at or before it. Then
it hands the ends to :meth:`~dprobe.models.plan_loop.PlanLoop.plan_end` in time order,
each with its windows, so plans do not depend on which partition ran ahead. A window
for an end already planned (a straggler) is learned at once; a window at or before what
its tenant has learned (a replay) changes nothing. An end that fails to plan (a model
bug) does not take the other ends of the same progress record with it: their events
come with the :class:`PlanFailed` that reports it.

:meth:`PlanOrder.state_dict` holds the loop's state and the windows and progress that
wait, so a checkpoint of it resumes exactly.

Example:
    >>> from dprobe.models.forecast.baselines import LastValue
    >>> from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
    >>> from dprobe.schema import LevelCounts, TenantWindow
    >>> order = PlanOrder(PlanLoop(LastValue(), PlanLoopSettings(capacity_gpus=32)), 2)
    >>> def w(t, end, run):
    ...     return TenantWindow(tenant=t, window_start=end - 60, window_end=end, hosts=1,
    ...         gpus_busy=run, instances=run, util_sum=0, level_counts=LevelCounts(),
    ...         effective_demand_gpus=run, pending_gpus=0, running_gpus=run)
    >>> order.on_window(w("a", 60, 30.0))    # tenant "a" lives in window partition 0
    >>> order.on_progress(0, 60.0)           # partition 1 has not closed 60 yet: no plan
    []
    >>> order.on_window(w("b", 60, 1.0))     # tenant "b", partition 1
    >>> [(e.tenant, e.action, e.delta_gpus) for e in order.on_progress(1, 60.0)]
    [('a', 'scale_up', 8.0), ('b', 'scale_down', -8.0)]
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from dprobe.models.plan_loop import PlanLoop
from dprobe.schema import ScalingEvent, TenantWindow, to_builtins


class PlanFailed(Exception):
    """Ends of one progress record that could not be planned (``failed``: end, error),
    with ``events``: those of the ends planned before and after them, which stand."""

    def __init__(self, events: list[ScalingEvent], failed: list[tuple[float, Exception]]) -> None:
        ends = ", ".join(f"{end:g}: {exc!r}" for end, exc in failed)
        super().__init__(f"{len(failed)} window end(s) could not be planned ({ends})")
        self.events = events
        self.failed = failed


class PlanOrder:
    """Windows and partitions' progress in, plans of the ready ends out (module doc)."""

    def __init__(self, loop: PlanLoop, partitions: int) -> None:
        self.loop = loop
        self.partitions = partitions
        self._pending: dict[tuple[float, str], TenantWindow] = {}
        self._progress: dict[int, float] = {}

    def on_window(self, window: TenantWindow) -> None:
        """Take one closed window: it waits for its end, or is learned at once when its
        end is already planned."""
        if window.window_end <= self.loop.planned_upto:
            self.loop.learn(window)
        else:
            self._pending[(window.window_end, window.tenant)] = window

    def on_progress(self, partition: int, upto: float) -> list[ScalingEvent]:
        """Window partition ``partition`` emitted every window ending at or before
        ``upto``; plans every end all partitions have passed; returns their events."""
        if not self.note_progress(partition, upto) or len(self._progress) < self.partitions:
            return []
        ready = min(self._progress.values())
        by_end: dict[float, list[TenantWindow]] = {}
        for key in sorted(k for k in self._pending if k[0] <= ready):
            by_end.setdefault(key[0], []).append(self._pending.pop(key))
        events: list[ScalingEvent] = []
        failed: list[tuple[float, Exception]] = []
        for end, windows in sorted(by_end.items()):
            try:
                events += self.loop.plan_end(end, windows)
            except Exception as exc:  # noqa: BLE001 - reported with the others' events
                failed.append((end, exc))
        if failed:
            raise PlanFailed(events, failed) from failed[0][1]
        return events

    def note_progress(self, partition: int, upto: float) -> bool:
        """Record a partition's progress without planning; True if it moved forward."""
        if upto <= self._progress.get(partition, -math.inf):
            return False
        self._progress[partition] = upto
        return True

    @property
    def waiting(self) -> int:
        """Windows waiting for their end to be planned."""
        return len(self._pending)

    def state_dict(self) -> dict[str, Any]:
        """The loop's state with the windows and progress that wait (plain data)."""
        return {
            **self.loop.state_dict(),
            "pending": [to_builtins(w) for _, w in sorted(self._pending.items())],
            "progress": dict(self._progress),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (a plan-loop checkpoint of any version)."""
        self.loop.load_state_dict(state)
        windows = (msgspec.convert(x, TenantWindow) for x in state.get("pending", []))
        self._pending = {(w.window_end, w.tenant): w for w in windows}
        self._progress = {int(p): float(u) for p, u in state.get("progress", {}).items()}
