"""Plans become valid ScalingEvents: round-trip through the codec, zero-sum, stable ids."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprobe.models.planner import Plan, PlanInput, Planner, TenantState
from dprobe.models.planner_events import scaling_events
from dprobe.schema import decode_scaling_event, encode


def _plan() -> Plan:
    return Planner().plan(
        PlanInput(
            ts=1_700_000_000.0,
            capacity_gpus=64,
            tenants=(
                TenantState("a", quota_gpus=16, p90=40.0, need_gpus=24.0),
                TenantState("b", quota_gpus=32, idle_gpus=24, guaranteed_gpus=8),
                TenantState("c", quota_gpus=16, idle_gpus=0, p90=16.0),
            ),
        )
    )


def test_events_decode_sum_to_zero_and_keep_their_ids() -> None:
    evs = scaling_events(_plan(), model_name="m", model_version="1", window_end=1_700_000_000.0)
    assert [(e.tenant, e.delta_gpus) for e in evs] == [("a", 24.0), ("b", -24.0)]
    assert sum(e.delta_gpus for e in evs) == 0
    assert all(decode_scaling_event(encode(e)) == e for e in evs)
    assert evs[0].time == "2023-11-14T22:13:20Z"
    again = scaling_events(_plan(), model_name="m", model_version="1", window_end=1_700_000_000.0)
    assert [e.event_id for e in again] == [e.event_id for e in evs]
    assert len({e.event_id for e in evs}) == 2


@pytest.mark.parametrize("window_end", [math.nan, math.inf, -60.0])
def test_a_window_end_that_is_no_epoch_time_is_named(window_end: float) -> None:
    # NaN failed with "cannot convert float NaN to integer", infinity with an
    # OverflowError, and a negative one gave events every consumer refuses on decode
    message = f"window_end must be a finite time >= 0 (epoch seconds), not {window_end!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        scaling_events(_plan(), model_name="m", model_version="1", window_end=window_end)


def test_a_plan_made_before_the_epoch_is_named() -> None:
    plan = replace(_plan(), ts=-1.0)
    message = "the plan's ts must be a finite time >= 0 (epoch seconds), not -1.0"
    with pytest.raises(ValueError, match=re.escape(message)):
        scaling_events(plan, model_name="m", model_version="1", window_end=0.0)


@pytest.mark.parametrize("when", ["window_end", "ts"])
def test_a_time_in_milliseconds_is_named_not_a_year_out_of_range(when: str) -> None:
    ms = 1_700_000_000_000.0  # epoch milliseconds given as seconds
    plan = replace(_plan(), ts=ms) if when == "ts" else _plan()
    window_end = ms if when == "window_end" else 1_700_000_000.0
    name = "window_end" if when == "window_end" else "the plan's ts"
    with pytest.raises(ValueError, match=re.escape(f"{name} must be a time in epoch seconds")):
        scaling_events(plan, model_name="m", model_version="1", window_end=window_end)


@pytest.mark.parametrize("p90", [1e8, 1e300])
def test_a_diverged_forecast_still_gives_events_every_consumer_decodes(p90: float) -> None:
    # a model that diverges to a finite but absurd forecast: the plan sizes the tenant to
    # the capacity, as for any forecast above it, and its event must still decode (one
    # that a consumer dead-letters leaves the plan incomplete, holding back every later one)
    tenants = (
        TenantState("a", quota_gpus=16, p50=p90 / 2, p90=p90),
        TenantState("b", quota_gpus=16, idle_gpus=16),
    )
    plan = Planner().plan(PlanInput(ts=600.0, capacity_gpus=32, tenants=tenants))
    evs = scaling_events(plan, model_name="m", model_version="1", window_end=600.0)
    assert [(e.tenant, e.delta_gpus) for e in evs] == [("a", 16.0), ("b", -16.0)]
    for e in evs:
        assert decode_scaling_event(encode(e)) == e
    # reported as the contract's largest number of GPUs
    assert (evs[0].forecast.p50, evs[0].forecast.p90) == (1e7, 1e7)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 8),  # quota, nodes
            st.integers(0, 8),  # idle, nodes (at most the quota)
            st.floats(0, 1e12),  # p90: up to a diverged model's
            st.floats(0, 200),  # need now
        ),
        min_size=1,
        max_size=6,
    )
)
def test_every_event_of_any_plan_decodes_and_the_plan_sums_to_zero(
    rows: list[tuple[int, int, float, float]],
) -> None:
    tenants = tuple(
        TenantState(f"vc-{i}", q * 8, idle_gpus=min(idle, q) * 8, p50=p90 / 2, p90=p90, need_gpus=n)
        for i, (q, idle, p90, n) in enumerate(rows)
    )
    capacity = sum(t.quota_gpus for t in tenants) + 16
    plan = Planner().plan(PlanInput(ts=600.0, capacity_gpus=capacity, tenants=tenants))
    evs = scaling_events(plan, model_name="m", model_version="1", window_end=600.0)
    assert sum(e.delta_gpus for e in evs) == 0
    assert all(e.plan_size == len(evs) == len(plan.moves) for e in evs)
    for e in evs:
        assert decode_scaling_event(encode(e)) == e
