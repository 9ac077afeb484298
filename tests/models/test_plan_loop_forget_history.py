"""A tenant the loop forgets leaves the planner's damping history too, also when a
restart with other cluster settings dropped the quotas the loop had for it: the state
(and each checkpoint) follows the tenants of the last ``forget_after_s``, not every
tenant seen before a settings change."""

from __future__ import annotations

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from tests.models.windows import demand_window

W = 60.0


def _plan(loop: PlanLoop, k: int, tenants: tuple[str, ...]) -> None:
    end = W * k
    loop.plan_end(
        end, [demand_window(t, end, running=float(k % 3 * 8), length_s=W) for t in tenants]
    )


def _restarted(loop: PlanLoop, capacity: int) -> PlanLoop:
    settings = PlanLoopSettings(capacity_gpus=capacity, horizon_s=W, forget_after_s=3600)
    after = PlanLoop(LastValue(), settings)
    after.load_state_dict(loop.state_dict())
    assert after.settings_changed  # the quotas restart from the new settings
    return after


def _history(loop: PlanLoop) -> set[str]:
    return set(loop.planner.state_dict()["history"])


def test_a_tenant_silent_before_a_settings_change_is_forgotten_by_the_planner_too() -> None:
    loop = PlanLoop(
        LastValue(), PlanLoopSettings(capacity_gpus=64, horizon_s=W, forget_after_s=3600)
    )
    for k in range(1, 10):
        _plan(loop, k, ("old", "x") if k < 4 else ("x",))
    loop = _restarted(loop, 128)
    for k in range(10, 300):
        _plan(loop, k, ("x",))
    assert set(loop.state_dict()["learned"]) == {"x"}
    assert _history(loop) == {"x"}


def test_a_forgotten_tenant_that_held_quota_at_a_settings_change_goes_too() -> None:
    loop = PlanLoop(
        LastValue(), PlanLoopSettings(capacity_gpus=64, horizon_s=W, forget_after_s=600)
    )
    for k in range(1, 30):  # "old" is forgotten after 10 minutes, but keeps its quota
        _plan(loop, k, ("old", "x") if k < 4 else ("x",))
    assert "old" not in loop.state_dict()["learned"] and loop.quotas().get("old", 0) > 0
    loop = _restarted(loop, 128)
    for k in range(30, 60):
        _plan(loop, k, ("x",))
    assert "old" not in loop.quotas()
    assert _history(loop) == {"x"}
