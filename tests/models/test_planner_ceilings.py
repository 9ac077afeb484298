"""A tenant's ceiling (``max_quota_gpus``, Volcano ``capability``) holds in every pass of
the planner, also where the ceiling or the guarantee is not a whole number of nodes."""

from __future__ import annotations

import math

from dprobe.models.planner import PlanInput, Planner, PlannerSettings, TenantState

NODE = 8


def _ceiling_of(t: TenantState, capacity: int) -> int:
    """The most ``t`` may hold, in whole nodes (reference: the docs' rule, by hand)."""
    top = capacity if t.max_quota_gpus is None else min(capacity, t.max_quota_gpus)
    return math.floor(top / NODE) * NODE


def test_restoring_a_guarantee_stops_at_the_ceiling() -> None:
    # guarantee 12 = capability 12 on 8-GPU nodes: one node fits under the ceiling, two do not
    a = TenantState("a", quota_gpus=0, guaranteed_gpus=12, max_quota_gpus=12)
    b = TenantState("b", quota_gpus=24, idle_gpus=24)
    plan = Planner(PlannerSettings(node_gpus=NODE)).plan(
        PlanInput(ts=0.0, capacity_gpus=24, tenants=(a, b))
    )
    got = plan.targets()
    assert got["a"] <= _ceiling_of(a, 24) == 8
    assert got["a"] == 8  # it is still raised as far as the ceiling lets it
    assert sum(got.values()) == 24
