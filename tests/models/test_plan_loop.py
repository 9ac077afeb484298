"""PlanLoop behind a PlanOrder: an end is planned only once every window partition has
passed it, whatever order the partitions' windows arrive in; plans are zero-sum; a
restored loop continues exactly like the original."""

from __future__ import annotations

import copy
import random

import msgspec

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.schema import ScalingEvent, TenantWindow
from dprobe.streams.plan_order import PlanOrder
from tests.models.windows import demand_window

W = 60.0
PARTITION = {"vc-a": 0, "vc-b": 1, "vc-c": 1, "vc-d": 2}


def _window(tenant: str, end: float, running: float) -> TenantWindow:
    return demand_window(tenant, end, running=running, length_s=W)


def _demand(tenant: str, k: int) -> float:
    """vc-a grows, vc-d shrinks, the others stay."""
    return {"vc-a": 4 + k, "vc-b": 8, "vc-c": 8, "vc-d": max(0, 30 - k)}[tenant]


def _partition_logs(n: int) -> dict[int, list[tuple[str, object]]]:
    """What each of 3 window partitions sends, in its own order: windows, then progress."""
    logs: dict[int, list[tuple[str, object]]] = {0: [], 1: [], 2: []}
    for k in range(1, n + 1):
        end = k * W
        for tenant, p in sorted(PARTITION.items()):
            logs[p].append(("window", _window(tenant, end, _demand(tenant, k))))
        for p, log in logs.items():
            log.append(("progress", (p, end)))
    return logs


def _interleave(logs: dict[int, list[tuple[str, object]]], rng: random.Random) -> list:
    """One planning-topic order: each partition's messages in order, partitions mixed."""
    queues = {p: list(msgs) for p, msgs in logs.items()}
    out = []
    while any(queues.values()):
        p = rng.choice([p for p, q in queues.items() if q])
        out.append(queues[p].pop(0))
    return out


def _run(loop: PlanOrder, messages: list) -> list[ScalingEvent]:
    events: list[ScalingEvent] = []
    for kind, body in messages:
        if kind == "window":
            loop.on_window(body)  # type: ignore[arg-type]
        else:
            events += loop.on_progress(*body)  # type: ignore[misc]
    return events


def _loop() -> PlanOrder:
    settings = PlanLoopSettings(capacity_gpus=64, horizon_s=W)
    return PlanOrder(PlanLoop(LastValue(), settings), partitions=3)


def test_plans_wait_for_every_partition_whatever_the_arrival_order() -> None:
    logs = _partition_logs(30)
    reference = _run(_loop(), _interleave(logs, random.Random(0)))
    assert reference, "the demand shift produced no plan"
    for seed in range(1, 6):
        # A partition far ahead of the others (a backlog) must not change any plan.
        assert _run(_loop(), _interleave(logs, random.Random(seed))) == reference
    skewed = logs[0] + logs[1] + logs[2]  # partition 0 entirely first
    assert _run(_loop(), skewed) == reference


def test_first_plan_splits_evenly_between_all_tenants_and_plans_are_zero_sum() -> None:
    assert _run(_loop(), _partition_logs(30)[0]) == [], "one partition alone planned"
    events = _run(_loop(), _interleave(_partition_logs(30), random.Random(3)))
    quota = dict.fromkeys(PARTITION, 16.0)
    by_plan: dict[str, list[ScalingEvent]] = {}
    for e in events:
        by_plan.setdefault(e.plan_id, []).append(e)
    for plan in sorted(by_plan.values(), key=lambda p: p[0].ts):
        assert sum(e.delta_gpus for e in plan) == 0
        for e in plan:
            assert e.current_quota_gpus == quota[e.tenant]
            quota[e.tenant] = e.target_quota_gpus
        assert sum(quota.values()) <= 64
    assert quota["vc-a"] > 16 > quota["vc-d"]


def test_each_end_is_planned_once_and_replays_are_ignored() -> None:
    messages = _interleave(_partition_logs(20), random.Random(1))
    loop = _loop()
    events = _run(loop, messages)
    assert events, "the demand shift produced no plan"
    assert _run(loop, messages) == []  # the same records again (a replay): nothing new
    ends = [e.window_end for e in events]
    assert ends == sorted(ends)
    plans_by_end: dict[float, set[str]] = {}
    for e in events:
        plans_by_end.setdefault(e.window_end, set()).add(e.plan_id)
    assert all(len(plans) == 1 for plans in plans_by_end.values()), plans_by_end
    assert len({e.event_id for e in events}) == len(events)


def test_a_restored_loop_continues_like_the_original() -> None:
    messages = _interleave(_partition_logs(30), random.Random(2))
    half = len(messages) // 2
    original = _loop()
    _run(original, messages[:half])
    restored = _loop()
    restored.load_state_dict(copy.deepcopy(original.state_dict()))
    after = _run(original, messages[half:])
    assert after, "nothing planned after the checkpoint: nothing to compare"
    assert _run(restored, messages[half:]) == after


class _TwoHorizons(LastValue):
    """p90 = demand now at the lead, a fixed 24 GPUs for vc-b further out."""

    def forecast(self, tenant, horizons):  # type: ignore[no-untyped-def]
        out = super().forecast(tenant, horizons)
        return {
            h: (p50, 24.0 if tenant == "vc-b" and h > 600 else p90) for h, (p50, p90) in out.items()
        }


def test_hold_keeps_what_a_tenant_needs_within_the_lend_horizon() -> None:
    def events(hold_s: float) -> dict[str, float]:
        s = PlanLoopSettings(
            capacity_gpus=64,
            horizon_s=600.0,
            hold_s=hold_s,
            initial_quotas={"vc-a": 16, "vc-b": 48},
        )
        loop = PlanLoop(_TwoHorizons(), s)
        windows = [_window("vc-a", W, 48.0), _window("vc-b", W, 0.0)]
        return {e.tenant: e.delta_gpus for e in loop.plan_end(W, windows)}

    # vc-a wants 32 more; vc-b, idle now, is forecast to need 24 GPUs within an hour
    assert events(0.0) == {"vc-a": 32.0, "vc-b": -32.0}
    assert events(3600.0) == {"vc-a": 24.0, "vc-b": -24.0}


def _forgetting_loop(quotas: dict[str, int], forget_after_s: float) -> PlanLoop:
    """A last-value loop over 32 GPUs planning one window ahead, forgetting tenants."""
    settings = PlanLoopSettings(
        capacity_gpus=32, horizon_s=W, initial_quotas=quotas, forget_after_s=forget_after_s
    )
    return PlanLoop(LastValue(), settings)


def test_a_tenant_silent_for_the_forget_time_is_forgotten_but_keeps_its_quota() -> None:
    """vc-gone holds quota and vc-left holds none; both stop sending windows. After
    ``forget_after_s`` neither is in the forecaster, the loop's state or its views, vc-gone
    keeps its quota (still its to lend) and vc-left leaves the quotas; vc-stay is untouched.
    A window of a forgotten time is not learned; a new one makes the tenant new."""
    day = 86_400.0
    loop = _forgetting_loop({"vc-stay": 16, "vc-gone": 16, "vc-left": 0}, day)
    for k in range(1, 4):  # vc-left runs nothing: it never borrows
        demand = {"vc-stay": 2.0, "vc-gone": 2.0, "vc-left": 0.0}
        loop.plan_end(k * W, [_window(t, k * W, d) for t, d in demand.items()])
    assert set(loop.forecaster.tenants()) == {"vc-stay", "vc-gone", "vc-left"}
    quota_gone = loop.quotas()["vc-gone"]
    assert quota_gone > 0
    end = 3 * W
    while end < 3 * W + day - W:  # vc-stay goes on alone, a day minus one window
        end += W
        loop.plan_end(end, [_window("vc-stay", end, 2.0)])
    assert set(loop.forecaster.tenants()) == {"vc-stay", "vc-gone", "vc-left"}
    end += W
    loop.plan_end(end, [_window("vc-stay", end, 2.0)])
    assert loop.forecaster.tenants() == ["vc-stay"]
    assert loop.forgotten_tenants == 2
    state = loop.state_dict()
    assert set(state["learned"]) == set(state["last"]) == {"vc-stay"}
    assert {t for t, *_ in state["outstanding"]} <= {"vc-stay"}
    assert set(state["forecasts"]) <= {"vc-stay"} and set(state["errors"]) <= {"vc-stay"}
    assert "vc-left" not in loop.quotas() and loop.quotas()["vc-gone"] > 0
    assert set(loop.tenants()) == {"vc-stay"}
    loop.learn(_window("vc-gone", 2 * W, 9.0))  # older than the forget time: not learned
    assert loop.forecaster.tenants() == ["vc-stay"]
    end += W
    loop.plan_end(end, [_window("vc-stay", end, 2.0), _window("vc-gone", end, 5.0)])
    assert loop.forecaster.tenants() == ["vc-gone", "vc-stay"]
    assert loop.forecaster.forecast("vc-gone", [W])[W][0] == 5.0


def test_forget_after_zero_keeps_every_tenant() -> None:
    loop = PlanLoop(LastValue(), PlanLoopSettings(capacity_gpus=32, horizon_s=W, forget_after_s=0))
    loop.plan_end(W, [_window("vc-a", W, 2.0), _window("vc-b", W, 2.0)])
    for k in range(2, 200):
        loop.plan_end(k * 3600.0, [_window("vc-a", k * 3600.0, 2.0)])
    assert loop.forecaster.tenants() == ["vc-a", "vc-b"]


def test_a_tenant_whose_windows_change_length_starts_afresh_in_the_forecaster() -> None:
    """A worker restarted with another window_s: the forecaster's history of the tenant
    counted 60-s windows, so it is dropped and the tenant learned again at 300 s."""
    loop = PlanLoop(LastValue(), PlanLoopSettings(capacity_gpus=32, horizon_s=600.0))
    for k in range(1, 30):
        loop.plan_end(k * W, [_window("vc-a", k * W, 4.0), _window("vc-b", k * W, 4.0)])
    assert loop.forecaster.state_dict()["tenants"]["vc-a"]["step"] == W
    end = 29 * W
    for _ in range(3):
        end += 300.0
        longer = msgspec.structs.replace(_window("vc-a", end, 6.0), window_start=end - 300.0)
        loop.plan_end(end, [longer, _window("vc-b", end, 4.0)])
    tenants = loop.forecaster.state_dict()["tenants"]
    assert tenants["vc-a"]["step"] == 300.0 and tenants["vc-a"]["n"] == 3
    assert tenants["vc-b"]["step"] == W and tenants["vc-b"]["n"] == 32


def test_a_forgotten_tenant_that_later_lends_all_its_quota_goes_too() -> None:
    """vc-gone holds quota when it is forgotten; once the planner has lent all of it
    away, its quota entry and damping history go as well (they would stay forever)."""
    day = 86_400.0
    loop = _forgetting_loop({"vc-stay": 16, "vc-gone": 16}, day)
    loop.plan_end(W, [_window("vc-stay", W, 2.0), _window("vc-gone", W, 2.0)])
    end = W
    while end < 3 * day:  # vc-stay alone; from day 2 it needs every GPU of the cluster
        end += W
        loop.plan_end(end, [_window("vc-stay", end, 2.0 if end < 2 * day else 32.0)])
        if end == day + 2 * W:  # forgotten, still holding its quota
            assert "vc-gone" not in loop.forecaster.tenants()
            assert loop.quotas()["vc-gone"] == 16
    assert loop.quotas() == {"vc-stay": 32}
    assert "vc-gone" not in loop.state_dict()["planner"]["history"]
