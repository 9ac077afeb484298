"""What the plan loop hands the planner: busy nodes are those the tenant's running GPUs
fill (a quota is a GPU count), and a NaN or infinite forecast is replaced by the tenant's
demand now instead of planning on it or failing the plan."""

from __future__ import annotations

import math

import pytest

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.schema import TenantWindow
from tests.models.windows import demand_window

W = 60.0


def _window(tenant: str, running: float, hosts: int, pending: float = 0.0) -> TenantWindow:
    return demand_window(tenant, W, running=running, pending=pending, hosts=hosts, length_s=W)


def _deltas(windows: list[TenantWindow], loop: PlanLoop | None = None) -> dict[str, float]:
    settings = PlanLoopSettings(
        capacity_gpus=128, horizon_s=600.0, initial_quotas={"vc-a": 64, "vc-b": 64}
    )
    loop = loop or PlanLoop(LastValue(), settings)
    return {e.tenant: e.delta_gpus for e in loop.plan_end(W, windows)}


def test_lendable_nodes_are_the_quota_beyond_the_nodes_running_gpus_fill() -> None:
    # a quota is a GPU count (Kueue, Volcano): eight 1-GPU jobs fill one node, whichever
    # hosts they run on; vc-b needs 56 more GPUs now
    for hosts in (1, 8):
        windows = [_window("vc-a", 8.0, hosts), _window("vc-b", 64.0, 8, pending=56.0)]
        assert _deltas(windows) == {"vc-a": -56.0, "vc-b": 56.0}


class _Broken(LastValue):
    """A diverged model for one tenant: ``value`` for vc-a at every horizon."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forecast(self, tenant, horizons):  # type: ignore[no-untyped-def]
        out = super().forecast(tenant, horizons)
        if tenant == "vc-a":
            return dict.fromkeys(out, (self.value, self.value))
        return out


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_forecast_is_planned_as_the_tenant_demand_now(value: float) -> None:
    settings = PlanLoopSettings(
        capacity_gpus=128, horizon_s=600.0, initial_quotas={"vc-a": 64, "vc-b": 64}
    )
    # vc-a runs 16 GPUs on 2 hosts; vc-b needs 56 more than its quota now
    windows = [_window("vc-a", 16.0, 2), _window("vc-b", 64.0, 8, pending=56.0)]
    broken = PlanLoop(_Broken(value), settings)
    reference = PlanLoop(LastValue(), settings)
    events = broken.plan_end(W, windows)
    assert broken.non_finite_forecasts == 1
    assert reference.non_finite_forecasts == 0
    expected = reference.plan_end(W, windows)

    def moves(evs):  # type: ignore[no-untyped-def]
        return [(e.tenant, e.action, e.target_quota_gpus, e.reason, e.forecast) for e in evs]

    # the same plan as a model that forecast the demand now
    assert moves(events) == moves(expected)
    assert {e.tenant: e.delta_gpus for e in events} == {"vc-a": -48.0, "vc-b": 48.0}
    assert broken.tenants()["vc-a"].forecast[600.0] == (16.0, 16.0)
