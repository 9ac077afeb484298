"""Online p90 calibration: coverage against hand counts, recovery after a regime change,
young tenants borrowing from the pool, p50 untouched, interpolation, state."""

from __future__ import annotations

import random

import pytest

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.forecast.calibration import Calibrated, conformal_quantile

from .forecast_cases import STEP, win


class Fixed:
    """p50 = ``center``, p90 = ``center + 1`` at every horizon, whatever it learns: a model
    whose spread is wrong for any noise but a tiny one."""

    name = "fixed"
    version = "1"

    def __init__(self, center: float = 10.0) -> None:
        self.center = center
        self.seen: set[str] = set()

    def learn_one(self, window) -> None:
        self.seen.add(window.tenant)

    def forecast(self, tenant, horizons):
        if tenant not in self.seen:
            return dict.fromkeys(horizons, (0.0, 0.0))
        return dict.fromkeys(horizons, (self.center, self.center + 1.0))

    def state_dict(self):
        return {"seen": sorted(self.seen)}

    def load_state_dict(self, state) -> None:
        self.seen = set(state["seen"])


def _coverage(model, series: list[float], tenant: str = "a", start: int = 0) -> list[bool]:
    """Per origin from ``start`` on: was the next window's demand at or below the p90 made
    when the origin's window closed (counted here, independently of the model)."""
    hits: list[bool] = []
    p90 = None
    for n, y in enumerate(series):
        if p90 is not None and n > start:
            hits.append(y <= p90)
        model.learn_one(win(tenant, n, y))
        p90 = model.forecast(tenant, [STEP])[STEP][1]
    return hits


def _noise(n: int, sigma: float, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [10.0 + abs(rng.gauss(0.0, sigma)) for _ in range(n)]


def test_conformal_quantile_is_the_rank_of_n_plus_one() -> None:
    scores = [float(i) for i in range(1, 20)]  # 19 scores
    assert conformal_quantile(scores, 0.9) == 18.0  # ceil(0.9 * 20) = 18th smallest
    assert conformal_quantile(scores, 0.5) == 10.0
    assert conformal_quantile([5.0], 0.9) == 5.0


def test_stationary_noise_is_covered_about_nine_times_in_ten() -> None:
    m = Calibrated(Fixed(), horizons_s=(STEP,), adapt_gamma=0.0)
    hits = _coverage(m, _noise(3000, 3.0), start=500)
    coverage = sum(hits) / len(hits)
    assert 0.87 <= coverage <= 0.93
    raw = _coverage(Fixed(), _noise(3000, 3.0), start=500)
    assert sum(raw) / len(raw) < 0.5  # the model's own p90 (center + 1) covers far less


def test_coverage_recovers_after_the_noise_grows() -> None:
    series = _noise(1500, 1.0) + _noise(2500, 5.0, seed=2)
    adaptive = Calibrated(Fixed(), horizons_s=(STEP,), window=500)
    hits = _coverage(adaptive, series, start=0)
    shift = 1500
    just_after = sum(hits[shift : shift + 50]) / 50
    later = hits[shift + 600 :]
    assert just_after < 0.8  # the old scores under-cover the new, wider noise
    assert 0.86 <= sum(later) / len(later) <= 0.94


def test_adaptive_level_rises_with_misses_within_its_bounds() -> None:
    m = Calibrated(Fixed(), horizons_s=(STEP,), adapt_gamma=0.01, adapt_max=0.05)
    _coverage(m, _noise(300, 1.0) + [40.0 + 10 * k for k in range(100)])  # every one a miss
    assert m.levels()[STEP] == pytest.approx(0.95)  # capped at level + adapt_max


def test_p50_is_the_inner_models_and_p90_never_below_it() -> None:
    inner, plain = LastValue(), LastValue()
    m = Calibrated(inner, horizons_s=(STEP, 6 * STEP))
    rng = random.Random(3)
    for n in range(400):
        w = win("a", n, float(rng.randint(0, 30)))
        m.learn_one(w)
        plain.learn_one(w)
        fc, ref = m.forecast("a", [STEP, 3 * STEP]), plain.forecast("a", [STEP, 3 * STEP])
        assert {h: v[0] for h, v in fc.items()} == {h: v[0] for h, v in ref.items()}
        assert all(p90 >= p50 for p50, p90 in fc.values())


def test_young_tenant_borrows_the_pool() -> None:
    m = Calibrated(Fixed(), horizons_s=(STEP,), prior_n=50.0, adapt_gamma=0.0)
    old = _noise(600, 3.0)
    for n, y in enumerate(old):
        m.learn_one(win("old", n, y))
    q_old = m.forecast("old", [STEP])[STEP][1] - 10.0
    m.learn_one(win("new", 600, 10.0))
    q_new = m.forecast("new", [STEP])[STEP][1] - 10.0
    assert q_new == pytest.approx(conformal_quantile([y - 10.0 for y in old[1:]], 0.9))
    assert q_new == pytest.approx(q_old, rel=0.1)
    for n in range(601, 800):  # the new tenant is steady: its own scores take over
        m.learn_one(win("new", n, 10.0))
    assert m.forecast("new", [STEP])[STEP][1] - 10.0 < 0.3 * q_new


def test_requested_horizons_between_calibrated_ones_are_interpolated() -> None:
    m = Calibrated(Fixed(), horizons_s=(STEP, 5 * STEP), adapt_gamma=0.0)
    rng = random.Random(4)
    for n in range(400):
        m.learn_one(win("a", n, 10.0 + rng.random() * 8))
    fc = m.forecast("a", [STEP, 3 * STEP, 5 * STEP, 10 * STEP, STEP / 2])
    q = {h: p90 - p50 for h, (p50, p90) in fc.items()}
    assert q[3 * STEP] == pytest.approx((q[STEP] + q[5 * STEP]) / 2)
    assert q[10 * STEP] == pytest.approx(q[5 * STEP])  # beyond the last: the last
    fit = m.fitted("a")[STEP]  # below the first: the first spread weight, shift from 0 at 0
    assert q[STEP / 2] == pytest.approx(fit["a"] * 1.0 + fit["b"] / 2)


def test_the_inner_spread_is_used_where_it_pays() -> None:
    class Honest(Fixed):
        """Knows each window's noise scale: its p90 spread is right up to a factor 2."""

        sigma = 1.0

        def forecast(self, tenant, horizons):
            return dict.fromkeys(horizons, (10.0, 10.0 + 2 * self.sigma))

    inner = Honest()
    m = Calibrated(inner, horizons_s=(STEP,))
    rng = random.Random(6)
    hits = []
    for n in range(3000):
        y = 10.0 + abs(rng.gauss(0.0, inner.sigma))
        if n > 500:
            hits.append(y <= m.forecast("a", [STEP])[STEP][1])
        m.learn_one(win("a", n, y))
        inner.sigma = 1.0 if (n // 50) % 2 else 6.0  # the next window's noise
    assert 0.87 <= sum(hits) / len(hits) <= 0.93
    assert m.fitted("a")[STEP]["a"] > 0.5  # follows the inner spread, not a constant


def _loss(y: float, q: float) -> float:
    return 0.9 * (y - q) if y >= q else 0.1 * (q - y)


def test_raw_fallback_keeps_the_inner_p90_while_it_lost_less() -> None:
    """With ``raw_fallback``, p90 is the inner model's exactly when, over the tenant's last
    ``window`` matured forecasts, the calibrated p90 (what the wrapper without the
    fallback forecast) lost more than the inner one; the losses are recounted here."""

    class Scaled(Fixed):
        sigma = 1.0

        def forecast(self, tenant, horizons):
            return dict.fromkeys(horizons, (10.0, 10.0 + 1.2816 * self.sigma))

    inners = [Scaled(), Scaled()]
    kw = {"horizons_s": (STEP,), "window": 30, "min_scores": 5, "prior_n": 0.0}
    plain = Calibrated(inners[0], **kw)
    fallback = Calibrated(inners[1], raw_fallback=True, **kw)
    rng = random.Random(3)
    edges: list[float] = []
    made = None  # (inner p90, calibrated p90) made at the last window's end
    kept = switched = 0
    for n in range(1500):
        y = 10.0 + rng.gauss(0.0, inners[0].sigma)  # this window's noise
        if made is not None:
            edges.append(_loss(y, made[1]) - _loss(y, made[0]))
        sigma = 1.0 if (n // 40) % 2 else 4.0  # the next window's noise, known to the inner
        for inner in inners:
            inner.sigma = sigma
        for m in (plain, fallback):
            m.learn_one(win("a", n, y))
        raw = 10.0 + 1.2816 * sigma
        cal = plain.forecast("a", [STEP])[STEP][1]
        got = fallback.forecast("a", [STEP])[STEP][1]
        if n > 40:
            recent = edges[-30:]
            expect_raw = sum(recent) / len(recent) > 0
            assert got == pytest.approx(raw if expect_raw else cal)
            kept += expect_raw
            switched += not expect_raw
        made = (raw, cal)
    assert kept > 50 and switched > 50  # both branches were exercised
    assert fallback.forecast("a", [STEP])[STEP][0] == 10.0  # p50 untouched


def test_an_uncalibrated_state_loads_with_fresh_calibration() -> None:
    plain = LastValue()
    for n in range(30):
        plain.learn_one(win("a", n, float(n % 4)))
    m = Calibrated(LastValue())
    m.load_state_dict(plain.state_dict())
    assert m.forecast("a", [STEP]) == plain.forecast("a", [STEP])  # nothing matured yet
    with pytest.raises(ValueError, match="horizons_s"):
        Calibrated(LastValue(), horizons_s=(STEP,)).load_state_dict(m.state_dict())


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="level"):
        Calibrated(LastValue(), level=1.0)
    with pytest.raises(ValueError, match="spread_weights"):
        Calibrated(LastValue(), spread_weights=())
