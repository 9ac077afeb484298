"""Plans applied whole and in order, however a catch-up over a multi-partition events
topic interleaves their events: every tenant ends at the target of its newest plan."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dprobe.models.planner import PlanInput, Planner, TenantState
from dprobe.models.planner_events import scaling_events
from dprobe.schema import ScalingEvent
from dprobe.sinks.plan_order import PlanAssembler

TENANTS = [f"vc-{i}" for i in range(6)]


def _plans(seed: int, n: int) -> list[list[ScalingEvent]]:
    """The non-empty plans of ``n`` planning instants, each applied: every few instants
    another tenant (chosen at random) bursts while the others idle."""
    rng = random.Random(seed)
    planner = Planner()
    quotas = dict.fromkeys(TENANTS, 16)
    out = []
    hot = ""
    for k in range(n):
        if k % 8 == 0:
            hot = rng.choice([t for t in TENANTS if t != hot])
        end = 1_700_000_000.0 + 60.0 * k
        states = tuple(
            TenantState(
                t, quota_gpus=quotas[t], idle_gpus=0 if t == hot else max(0, quotas[t] - 8),
                p50=40.0 if t == hot else 2.0, p90=48.0 if t == hot else 4.0,
            )
            for t in TENANTS
        )  # fmt: skip
        plan = planner.plan(PlanInput(ts=end, capacity_gpus=96, tenants=states))
        quotas.update(plan.targets())
        events = scaling_events(plan, model_name="m", model_version="1", window_end=end)
        if events:
            out.append(events)
    return out


def _catch_up_order(plans: list[list[ScalingEvent]], partitions: int) -> list[ScalingEvent]:
    """The events as a consumer catching up reads them: keyed by tenant over
    ``partitions`` partitions, each partition read to its end before the next."""
    by_partition: dict[int, list[ScalingEvent]] = {}
    for events in plans:
        for e in events:
            by_partition.setdefault(TENANTS.index(e.tenant) % partitions, []).append(e)
    return [e for p in sorted(by_partition) for e in by_partition[p]]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), partitions=st.integers(1, 4), dup=st.booleans())
def test_every_tenant_ends_at_its_newest_target(seed: int, partitions: int, dup: bool) -> None:
    plans = _plans(seed, 40)
    assert len(plans) >= 2
    truth: dict[str, float] = {}
    for events in plans:  # plan order
        assert all(e.plan_size == len(events) for e in events)
        for e in events:
            truth[e.tenant] = e.target_quota_gpus
    stream = _catch_up_order(plans, partitions)
    if dup:  # at-least-once delivery: some events twice
        stream = stream + stream[: len(stream) // 3]
    plans_in = PlanAssembler()
    applied: dict[str, float] = {}
    for e in stream:
        for move in plans_in.add(e):
            applied[move.tenant] = move.target_quota_gpus
    assert applied == truth
    assert plans_in.pending_plans == 0


def test_plan_numbers_grow_with_every_plan() -> None:
    seqs = [events[0].plan_seq for events in _plans(3, 30)]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] > 0
