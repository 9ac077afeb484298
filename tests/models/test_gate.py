"""The paying gate: per tenant, forecasts give way to demand now while they lose to it,
and come back when they pay again; scores recomputed by hand from the same windows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dprobe.models.forecast.baselines import LastValue, RecentPeak
from dprobe.models.forecast.gate import Gated
from dprobe.models.forecast.quantile_loss import pinball
from dprobe.models.forecast.registry import make_forecaster


def _w(tenant: str, i: int, y: float) -> SimpleNamespace:
    return SimpleNamespace(
        tenant=tenant,
        window_start=300.0 * i,
        window_end=300.0 * (i + 1),
        running_gpus=y,
        pending_gpus=0.0,
    )


def _feed(m: Gated, tenant: str, ys: list[float]) -> None:
    for i, y in enumerate(ys):
        m.learn_one(_w(tenant, i, y))
        m.forecast(tenant, [300.0, 600.0])


def test_losses_match_a_hand_computation() -> None:
    ys = [10.0, 30.0, 10.0, 10.0, 12.0, 10.0, 10.0]
    m = Gated(RecentPeak(), horizon_s=600.0, halflife=1e9, min_scores=0)
    _feed(m, "a", ys)
    # forecast made at window i (p90 = RecentPeak's peak so far; reactive = y_i) is scored
    # at window i + 2 (600 s later); with no forgetting the loss is a plain running mean
    # weighted like an EWMA with decay ~1: compare the ratio, which is what decides
    fc = [pinball(ys[i + 2] - max(ys[: i + 1]), 0.9) for i in range(len(ys) - 2)]
    re = [pinball(ys[i + 2] - ys[i], 0.9) for i in range(len(ys) - 2)]
    f, r, n = m.losses("a")
    assert n == len(fc)
    assert f / r == pytest.approx(sum(fc) / sum(re), rel=1e-6)


def test_falls_back_to_demand_now_and_recovers() -> None:
    m = Gated(RecentPeak(k=4), horizon_s=600.0, min_scores=3, halflife=3.0)
    _feed(m, "a", [10.0, 40.0] + [10.0] * 3)  # the remembered spike does not pay
    assert not m.paying("a")
    assert m.forecast("a", [600.0, 3600.0]) == {600.0: (10.0, 10.0), 3600.0: (10.0, 10.0)}
    # a steady climb: demand now lags it, the peak of the last windows does not
    _feed_more = [20.0 + 8.0 * k for k in range(12)]
    for k, y in enumerate(_feed_more, start=5):
        m.learn_one(_w("a", k, y))
        m.forecast("a", [600.0])
    assert m.paying("a")
    assert m.paying("never-seen")


def test_state_round_trips_and_an_ungated_state_loads_into_the_inner_model() -> None:
    m = Gated(RecentPeak(), horizon_s=600.0, min_scores=2)
    _feed(m, "a", [10.0, 40.0, 10.0, 10.0, 10.0, 10.0])
    m2 = Gated(RecentPeak(), horizon_s=600.0, min_scores=2)
    m2.load_state_dict(m.state_dict())
    assert m2.paying("a") == m.paying("a")
    assert m2.forecast("a", [600.0]) == m.forecast("a", [600.0])
    plain = LastValue()
    plain.learn_one(_w("a", 0, 7.0))
    m3 = Gated(LastValue())
    m3.load_state_dict(plain.state_dict())
    assert m3.forecast("a", [600.0]) == {600.0: (7.0, 7.0)}


def test_registry_wraps_calibration_inside_the_gate() -> None:
    m = make_forecaster("last-value", calibrate=True, gate=True, gating={"horizon_s": 900.0})
    assert type(m).__name__ == "Gated" and type(m.inner).__name__ == "Calibrated"
    assert m.horizon_s == 900.0 and m.version.endswith("+gate1")
    with pytest.raises(ValueError):
        Gated(LastValue(), level=1.0)
