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


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), partitions=st.integers(2, 4))
def test_applied_quotas_pass_only_through_states_some_plan_made(seed: int, partitions: int) -> None:
    plans = _plans(seed, 40)
    start = {e.tenant: e.current_quota_gpus for e in reversed([e for p in plans for e in p])}
    # the quotas after each plan, applied in plan order: the states a plan made
    states = []
    quotas = dict.fromkeys(TENANTS, 16.0) | start
    for events in plans:
        quotas = quotas | {e.tenant: e.target_quota_gpus for e in events}
        states.append(dict(quotas))
    rng = random.Random(seed)
    stream = list(_catch_up_order(plans, partitions))
    # partitions read in turns of a few records, not one after another
    by_p: dict[int, list[ScalingEvent]] = {}
    for e in stream:
        by_p.setdefault(TENANTS.index(e.tenant) % partitions, []).append(e)
    interleaved = []
    while any(by_p.values()):
        p = rng.choice([k for k, v in by_p.items() if v])
        take = rng.randint(1, 3)
        interleaved += by_p[p][:take]
        del by_p[p][:take]
    plans_in = PlanAssembler()
    applied = dict.fromkeys(TENANTS, 16.0) | start
    for e in interleaved:
        released = plans_in.add(e)
        for move in released:
            applied[move.tenant] = move.target_quota_gpus
        if released:
            assert applied in states  # never a mix of plans
            assert sum(applied.values()) <= 96
    assert applied == states[-1]


def _event(i: str, seq: int, tenant: str, cur: float, tgt: float, size: int = 2) -> ScalingEvent:
    from dprobe.schema import Forecast, ModelInfo

    return ScalingEvent(
        event_id=i, plan_id=f"p{seq}", ts=1.0, time="", tenant=tenant,
        action="scale_up" if tgt > cur else "scale_down", current_quota_gpus=cur,
        target_quota_gpus=tgt, delta_gpus=tgt - cur, reason="r", message="",
        forecast=Forecast(horizon_s=600, p50=1, p90=1), model=ModelInfo(name="m", version="1"),
        plan_seq=seq, plan_size=size,
    )  # fmt: skip


def test_a_newer_plan_waits_for_an_older_one_until_it_expires() -> None:
    now = [0.0]
    plans = PlanAssembler(max_age_s=300, clock=lambda: now[0])
    assert plans.add(_event("a1", 1, "vc-a", 8, 16)) == []  # plan 1: one of two events
    assert plans.add(_event("b1", 2, "vc-b", 16, 8)) == []
    assert plans.add(_event("b2", 2, "vc-c", 8, 16)) == []  # plan 2 complete, held back
    assert plans.pending_plans == 2 and plans.pending_event_ids == {"a1", "b1", "b2"}
    now[0] = 400.0
    assert [e.event_id for e in plans.release_ready()] == ["b1", "b2"]  # plan 1 expired
    assert plans.expired == 1 and plans.pending_plans == 0


def test_an_expired_plan_delivered_again_is_applied() -> None:
    now = [0.0]
    plans = PlanAssembler(max_age_s=300, clock=lambda: now[0])
    assert plans.add(_event("x1", 1, "vc-a", 8, 16)) == []
    now[0] = 400.0
    assert plans.release_ready() == [] and plans.expired == 1
    assert plans.add(_event("x1", 1, "vc-a", 8, 16)) == []  # again, from the start
    assert [e.event_id for e in plans.add(_event("x2", 1, "vc-b", 16, 8))] == ["x1", "x2"]
    assert plans.duplicates == 0


def test_a_second_plan_for_the_same_window_end_is_not_applied_in_part() -> None:
    """Two plans made at one window end (a worker that re-planned it from another state,
    e.g. after a checkpoint it could not load): the first applied stands, and the second
    sets no tenant, so the quotas stay a state a plan made and keep their sum."""
    import msgspec

    plans = PlanAssembler()
    applied = {"vc-a": 16.0, "vc-b": 16.0, "vc-c": 16.0}
    first = [_event("f1", 5, "vc-a", 16, 24), _event("f2", 5, "vc-b", 16, 8)]
    again = [_event("s1", 5, "vc-a", 16, 24), _event("s2", 5, "vc-c", 16, 8)]
    again = [msgspec.structs.replace(e, plan_id="p5-replanned") for e in again]
    for e in first + again:
        for move in plans.add(e):
            applied[move.tenant] = move.target_quota_gpus
    assert applied == {"vc-a": 24.0, "vc-b": 8.0, "vc-c": 16.0}
    assert sum(applied.values()) == 48.0


def test_a_second_plan_for_the_same_window_end_on_other_tenants_is_not_applied() -> None:
    """The second plan shares no tenant with the first: it is still another plan of the
    same window end, and applied it would leave quotas no single plan made."""
    import msgspec

    plans = PlanAssembler()
    first = [_event("f1", 5, "vc-a", 16, 24), _event("f2", 5, "vc-b", 16, 8)]
    again = [_event("s1", 5, "vc-c", 16, 24), _event("s2", 5, "vc-d", 16, 8)]
    again = [msgspec.structs.replace(e, plan_id="p5-replanned") for e in again]
    released = [m.event_id for e in first + again for m in plans.add(e)]
    assert released == ["f1", "f2"]
    assert plans.stale_events == 2
    # a later window end's plan is applied as usual
    later = [_event("n1", 6, "vc-c", 16, 24), _event("n2", 6, "vc-d", 16, 8)]
    assert [m.event_id for e in later for m in plans.add(e)] == ["n1", "n2"]


def test_a_plan_older_than_one_applied_holds_no_newer_plan_back() -> None:
    # plan 1 begins to arrive only after plan 2 went out: it can no longer come before
    # it, so plan 3 need not wait for it (it waited until plan 1 expired, 300 s)
    plans = PlanAssembler(max_age_s=300, clock=lambda: 0.0)
    two = [_event("b1", 2, "vc-b", 16, 8), _event("b2", 2, "vc-c", 8, 16)]
    assert [m.event_id for e in two for m in plans.add(e)] == ["b1", "b2"]
    assert plans.add(_event("a1", 1, "vc-a", 8, 16)) == []  # one of plan 1's two events
    three = [_event("c1", 3, "vc-c", 16, 8), _event("c2", 3, "vc-d", 8, 16)]
    assert [m.event_id for e in three for m in plans.add(e)] == ["c1", "c2"]
    # plan 1 completed late: only its tenants that no newer plan set
    assert [m.event_id for m in plans.add(_event("a2", 1, "vc-e", 16, 8))] == ["a1", "a2"]


def test_an_older_plan_still_incomplete_holds_newer_ones_back() -> None:
    plans = PlanAssembler(max_age_s=300, clock=lambda: 0.0)
    assert plans.add(_event("a1", 1, "vc-a", 8, 16)) == []
    three = [_event("c1", 3, "vc-c", 16, 8), _event("c2", 3, "vc-d", 8, 16)]
    assert [m.event_id for e in three for m in plans.add(e)] == []
    assert [m.event_id for m in plans.add(_event("a2", 1, "vc-e", 16, 8))] == [
        "a1", "a2", "c1", "c2",
    ]  # fmt: skip
