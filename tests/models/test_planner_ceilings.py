"""A tenant's ceiling (``max_quota_gpus``, Volcano ``capability``) holds in every pass of
the planner, also where the ceiling or the guarantee is not a whole number of nodes."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6),  # quota, nodes
            st.integers(0, 60),  # guarantee, GPUs
            st.integers(0, 60),  # ceiling above the guarantee, GPUs
            st.floats(0, 80),  # p90
            st.booleans(),  # with a nominal quota of 4 nodes
        ),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 6),
    st.booleans(),
)
def test_no_pass_raises_a_tenant_past_its_ceiling(
    rows: list[tuple[int, int, int, float, bool]], spare_nodes: int, return_idle: bool
) -> None:
    tenants = tuple(
        TenantState(
            f"t{i}",
            quota_gpus=q * NODE,
            guaranteed_gpus=g,
            idle_gpus=q * NODE,
            p90=p90,
            max_quota_gpus=g + extra,
            nominal_gpus=4 * NODE if nominal else None,
        )
        for i, (q, g, extra, p90, nominal) in enumerate(rows)
    )
    capacity = sum(t.quota_gpus for t in tenants) + spare_nodes * NODE
    plan = Planner(PlannerSettings(node_gpus=NODE, return_idle=return_idle)).plan(
        PlanInput(ts=0.0, capacity_gpus=capacity, tenants=tenants)
    )
    for t, d in zip(tenants, plan.decisions, strict=True):
        assert d.target_quota_gpus <= max(t.quota_gpus, _ceiling_of(t, capacity)), (t, d)
