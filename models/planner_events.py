"""Turn a :class:`~dprobe.models.planner.Plan` into ``ScalingEvent`` messages (one per move).

``event_id`` is a hash of plan id, tenant and window end, so re-emitting the same plan
after a restart gives the same ids and consumers drop the duplicates.

Example:
    >>> from dprobe.models.planner import Planner, PlanInput, TenantState
    >>> plan = Planner().plan(PlanInput(ts=600.0, capacity_gpus=32, tenants=(
    ...     TenantState("a", quota_gpus=16, p90=32.0),
    ...     TenantState("b", quota_gpus=16, idle_gpus=16))))
    >>> evs = scaling_events(plan, model_name="last-value", model_version="1", window_end=600.0)
    >>> [(e.tenant, e.action, e.delta_gpus) for e in evs]
    [('a', 'scale_up', 16.0), ('b', 'scale_down', -16.0)]
"""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime

from dprobe.models.planner import Plan
from dprobe.schema import (
    MAX_EPOCH_S,
    MAX_GPUS,
    MAX_ID_CHARS,
    MAX_SPAN_S,
    Forecast,
    ModelInfo,
    ScalingEvent,
)


def event_id(plan_id: str, tenant: str, window_end: float) -> str:
    """Deterministic id of one move of one plan."""
    return hashlib.sha256(f"{plan_id}|{tenant}|{window_end!r}".encode()).hexdigest()[:32]


def plan_seq(window_end: float) -> int:
    """Sequence number of the plan made at ``window_end``: its time in milliseconds (plans
    are made at increasing window ends, so it grows with every plan, and a replayed plan
    gets the same number)."""
    return max(0, round(window_end * 1000))


def scaling_events(
    plan: Plan,
    *,
    model_name: str,
    model_version: str,
    window_end: float,
    source: str = "dprobe/worker",
) -> list[ScalingEvent]:
    """One ``ScalingEvent`` per move of ``plan`` (deltas sum to zero), sorted by tenant.

    ``window_end`` and the plan's ``ts`` are epoch seconds: a NaN, infinite or negative one,
    or one beyond 1e11 s (milliseconds), which no consumer would decode, is refused with a
    ``ValueError``. A forecast above 1e7 GPUs (a diverged model) is reported as 1e7, and a
    horizon above 1e7 s as 1e7 s, the most an event carries.
    """
    for name, t in (("window_end", window_end), ("the plan's ts", plan.ts)):
        if not (math.isfinite(t) and t >= 0):
            raise ValueError(f"{name} must be a finite time >= 0 (epoch seconds), not {t!r}")
        if t > MAX_EPOCH_S:  # an event with it would not decode (nor one in milliseconds)
            raise ValueError(
                f"{name} must be a time in epoch seconds, at most {MAX_EPOCH_S:g}, not {t!r} "
                "(milliseconds?)"
            )
    when = datetime.fromtimestamp(plan.ts, tz=UTC).isoformat().replace("+00:00", "Z")
    seq = plan_seq(window_end)
    out = []
    for d in plan.moves:
        out.append(
            ScalingEvent(
                event_id=event_id(plan.plan_id, d.tenant, window_end),
                plan_id=plan.plan_id,
                ts=plan.ts,
                time=when,
                tenant=d.tenant,
                action="scale_up" if d.delta_gpus > 0 else "scale_down",
                current_quota_gpus=float(d.current_quota_gpus),
                target_quota_gpus=float(d.target_quota_gpus),
                delta_gpus=float(d.delta_gpus),
                # a diverged model's absurd forecast is reported as the most the contract
                # carries: an event a consumer cannot decode would hold back every plan
                forecast=Forecast(
                    horizon_s=min(d.horizon_s, MAX_SPAN_S),
                    p50=min(d.p50, MAX_GPUS),
                    p90=min(d.p90, MAX_GPUS),
                ),
                reason=d.reason,
                message=d.message[:MAX_ID_CHARS],
                model=ModelInfo(name=model_name, version=model_version),
                source=source,
                guaranteed_gpus=float(d.guaranteed_gpus),
                window_end=window_end,
                plan_seq=seq,
                plan_size=len(plan.moves),
            )
        )
    return out
