"""Apply quota plans whole and in plan order, however their events arrive.

Each ScalingEvent carries its plan's sequence number (``plan_seq``, growing with every
plan) and size (``plan_size``, its number of events). :class:`PlanAssembler` buffers
events by ``plan_id`` and releases a plan once all of its events have arrived (events of
older workers without a size: once their deltas sum to zero). Plans come out in plan
order: a complete plan waits while an older one is still incomplete (events of a topic
with several partitions arrive out of order), so the quotas applied never pass through a
state no plan made. A plan older than one already released (it began to arrive only
after) is released only with the events of tenants that no newer plan has set, so every
tenant ends at the target of the newest plan that moved it, and holds no newer plan
back; a second plan made at the same window end (``plan_seq``) as one applied (another
``plan_id``), whatever its tenants, is not applied at all. Duplicate ``event_id`` s are
dropped; a plan still incomplete after ``max_age_s`` is dropped with a warning, never
applied in part, and the plans it held back go out (call :meth:`release_ready` when no
event comes, so they need not wait for the next one, and :meth:`end_of_input` when none
ever will); its events count as new if they are delivered again.

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


SEQ_PLANS_KEPT = 1024  # window ends whose applied plan is remembered (bounded memory)


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
    _ready: dict[str, list[ScalingEvent]] = field(default_factory=dict)  # complete, held back
    _tenant_seq: dict[str, int] = field(default_factory=dict)  # newest plan applied per tenant
    # the plan applied at each recent window end (plan_seq), the newest SEQ_PLANS_KEPT
    _seq_plan: dict[int, str] = field(default_factory=dict)

    @property
    def pending_plans(self) -> int:
        """Plans not released yet: incomplete, or complete behind an incomplete older one."""
        return len(self._pending) + len(self._ready)

    @property
    def pending_event_ids(self) -> set[str]:
        """Ids of the events held (not released, not dropped): a consumer that commits
        offsets commits none at or after theirs."""
        held = [e for _, evs in self._pending.values() for e in evs]
        held += [e for evs in self._ready.values() for e in evs]
        return {e.event_id for e in held}

    def add(self, event: ScalingEvent) -> list[ScalingEvent]:
        """Add one event; return the events to apply of the plans that can go out now, in
        plan order (``[]`` while the plan is incomplete or waits for an older one)."""
        self.expire()
        if not self.seen.add(event.event_id):
            self.duplicates += 1
            return self._flush()
        _, events = self._pending.setdefault(event.plan_id, (self.clock(), []))
        events.append(event)
        if _complete(events):
            del self._pending[event.plan_id]
            self._ready[event.plan_id] = sorted(events, key=lambda e: e.tenant)
        return self._flush()

    def release_ready(self) -> list[ScalingEvent]:
        """Drop expired plans and return the events of the plans that can go out now."""
        self.expire()
        return self._flush()

    def _flush(self) -> list[ScalingEvent]:
        # the oldest plan still coming that can still come before the others: one older
        # than a plan applied already goes out whenever it completes (filtered)
        applied = max(self._seq_plan, default=0)
        oldest = min(
            (s for _, evs in self._pending.values() if (s := evs[0].plan_seq) > applied),
            default=None,
        )
        out: list[ScalingEvent] = []
        for plan_id, events in sorted(self._ready.items(), key=lambda p: p[1][0].plan_seq):
            seq = events[0].plan_seq
            if seq > 0 and oldest is not None and seq > oldest:
                break  # an older plan is still coming
            del self._ready[plan_id]
            out += self._release(events)
        return out

    def _release(self, events: list[ScalingEvent]) -> list[ScalingEvent]:
        seq = events[0].plan_seq
        if seq <= 0:  # no sequence number (an older worker): as it comes
            return events
        plan_id = events[0].plan_id
        if self._seq_plan.get(seq, plan_id) != plan_id or any(
            self._tenant_seq.get(e.tenant) == seq for e in events
        ):
            # another plan of the same window end was applied (a worker planned it again
            # from another state): part of this one would break the sum of the quotas
            self.stale_events += len(events)
            log.warning(
                "plan %s made at the same window end as a plan applied already; not applied",
                plan_id,
            )
            return []
        out = [e for e in events if self._tenant_seq.get(e.tenant, 0) < seq]
        self.stale_events += len(events) - len(out)
        for e in out:
            self._tenant_seq[e.tenant] = seq
        if out:
            self._seq_plan[seq] = plan_id
            if len(self._seq_plan) > SEQ_PLANS_KEPT:
                del self._seq_plan[min(self._seq_plan)]
        return out

    def expire(self) -> list[str]:
        """Drop plans older than ``max_age_s``; return their ids."""
        now = self.clock()
        old = [p for p, (t, _) in self._pending.items() if now - t > self.max_age_s]
        self._drop(old)
        return old

    def end_of_input(self) -> list[ScalingEvent]:
        """No event will come any more (a file or stdin ended): drop every incomplete
        plan, with a warning, and return the events of the plans they held back."""
        self._drop(list(self._pending), " at the end of the input")
        return self._flush()

    def _drop(self, plan_ids: list[str], when: str = "") -> None:
        for plan_id in plan_ids:
            _, events = self._pending.pop(plan_id)
            for e in events:  # delivered again later, the plan can still complete
                self.seen.discard(e.event_id)
            self.expired += 1
            log.warning("plan %s incomplete (%d events)%s; not applied", plan_id, len(events), when)


def _complete(events: list[ScalingEvent]) -> bool:
    size = events[0].plan_size
    if size > 0:
        return len(events) >= size
    return len(events) >= 2 and abs(sum(e.delta_gpus for e in events)) < 1e-6
