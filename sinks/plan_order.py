"""Apply quota plans whole and in plan order, however their events arrive.

Each ScalingEvent carries its plan's sequence number (``plan_seq``, growing with every
plan) and size (``plan_size``, its number of events). :class:`PlanAssembler` buffers
events by ``plan_id`` and releases a plan once all of its events have arrived (events of
older workers without a size: once their deltas sum to zero). Released plans come out
in the order they complete; a plan older than one already released (a catch-up over a
topic with several partitions) is released only with the events of tenants that no
newer plan has set, so every tenant ends at the target of the newest plan that moved it.
Duplicate ``event_id`` s are dropped; a plan still incomplete after ``max_age_s`` is
dropped with a warning, never applied in part.

Example:
    >>> from dprobe.schema import Forecast, ModelInfo, ScalingEvent
    >>> def ev(i, seq, tenant, cur, tgt):
    ...     return ScalingEvent(event_id=i, plan_id=f"p{seq}", ts=1.0, time="", tenant=tenant,
    ...         action="scale_up" if tgt > cur else "scale_down", current_quota_gpus=cur,
    ...         target_quota_gpus=tgt, delta_gpus=tgt - cur, reason="r", message="",
    ...         forecast=Forecast(horizon_s=600, p50=1, p90=1), model=ModelInfo(name="m",
    ...         version="1"), plan_seq=seq, plan_size=2)
    >>> plans = PlanAssembler()
    >>> plans.add(ev("e3", 2, "vc-a", 16, 24)), plans.pending_plans
    ([], 1)
    >>> [e.tenant for e in plans.add(ev("e4", 2, "vc-c", 16, 8))]
    ['vc-a', 'vc-c']
    >>> plans.add(ev("e1", 1, "vc-a", 8, 16))   # an older plan, completed late
    []
    >>> [(e.tenant, e.target_quota_gpus) for e in plans.add(ev("e2", 1, "vc-b", 16, 8))]
    [('vc-b', 8)]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dprobe.schema import ScalingEvent
from dprobe.sinks.seen_ids import SeenIds

log = logging.getLogger(__name__)


@dataclass
class PlanAssembler:
    """Buffers events by plan; releases complete plans, newest target per tenant wins."""

    max_age_s: float = 300.0
    clock: Callable[[], float] = time.monotonic
    seen: SeenIds = field(default_factory=SeenIds)
    duplicates: int = 0
    expired: int = 0
    stale_events: int = 0  # events of an older plan a newer one had already overridden
    _pending: dict[str, tuple[float, list[ScalingEvent]]] = field(default_factory=dict)
    _tenant_seq: dict[str, int] = field(default_factory=dict)  # newest plan applied per tenant

    @property
    def pending_plans(self) -> int:
        return len(self._pending)

    def add(self, event: ScalingEvent) -> list[ScalingEvent]:
        """Add one event; return the events to apply of the plan it completes (else ``[]``)."""
        self.expire()
        if not self.seen.add(event.event_id):
            self.duplicates += 1
            return []
        _, events = self._pending.setdefault(event.plan_id, (self.clock(), []))
        events.append(event)
        if not _complete(events):
            return []
        del self._pending[event.plan_id]
        return self._release(sorted(events, key=lambda e: e.tenant))

    def _release(self, events: list[ScalingEvent]) -> list[ScalingEvent]:
        seq = events[0].plan_seq
        if seq <= 0:  # no sequence number (an older worker): as it comes
            return events
        out = [e for e in events if self._tenant_seq.get(e.tenant, 0) < seq]
        self.stale_events += len(events) - len(out)
        for e in out:
            self._tenant_seq[e.tenant] = seq
        return out

    def expire(self) -> list[str]:
        """Drop plans older than ``max_age_s``; return their ids."""
        now = self.clock()
        old = [p for p, (t, _) in self._pending.items() if now - t > self.max_age_s]
        for plan_id in old:
            _, events = self._pending.pop(plan_id)
            self.expired += 1
            log.warning("plan %s incomplete (%d events); not applied", plan_id, len(events))
        return old


def _complete(events: list[ScalingEvent]) -> bool:
    size = events[0].plan_size
    if size > 0:
        return len(events) >= size
    return len(events) >= 2 and abs(sum(e.delta_gpus for e in events)) < 1e-6
