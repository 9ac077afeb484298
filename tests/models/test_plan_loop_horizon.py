"""After a restart with another planning horizon, a tenant's realised forecast error is
reported for the horizon it is forecast at now, not also, frozen, for the old one."""

from __future__ import annotations

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from tests.models.windows import demand_window


def _run(loop: PlanLoop, ends: range) -> None:
    for k in ends:
        end = 60.0 * k
        loop.plan_end(end, [demand_window("vc-a", end, running=float(k % 7), length_s=60.0)])


def test_the_error_of_an_old_horizon_is_no_longer_reported() -> None:
    before = PlanLoop(LastValue(), PlanLoopSettings(capacity_gpus=64, horizon_s=600.0))
    _run(before, range(1, 30))
    assert set(before.tenants()["vc-a"].abs_error) == {600.0}
    after = PlanLoop(LastValue(), PlanLoopSettings(capacity_gpus=64, horizon_s=60.0))
    after.load_state_dict(before.state_dict())
    _run(after, range(30, 60))
    view = after.tenants()["vc-a"]
    assert set(view.forecast) == {60.0}
    assert set(view.abs_error) == {60.0}
