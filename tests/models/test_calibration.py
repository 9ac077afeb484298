"""Online p90 calibration: coverage against hand counts, recovery after a regime change,
young tenants borrowing from the pool, p50 untouched, interpolation, the activity term
against a brute-force fit, state (and a state of the layout before the activity term)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.forecast.calibration import Calibrated, conformal_quantile, fit_affine

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
    assert q[STEP / 2] == pytest.approx(fit["a"] * 1.0 + fit["c"] * m.activity("a") + fit["b"] / 2)


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
    # calibrated for other horizons (the planning lead changed): the inner model's state
    # is kept, the calibration starts again
    for n in range(30, 90):
        m.learn_one(win("a", n, float(n % 4)))
    assert m.fitted("a")
    other = Calibrated(LastValue(), horizons_s=(STEP,))
    other.load_state_dict(m.state_dict())
    assert other.inner.state_dict() == m.inner.state_dict()
    assert other.fitted("a") == {} and other.tenants() == []


def test_a_horizon_shorter_than_a_window_leaves_the_others_calibrated() -> None:
    # a horizon under half a window can never be scored; the 1-hour one must still calibrate
    both = Calibrated(LastValue(), horizons_s=(0.4 * STEP, 6 * STEP))
    alone = Calibrated(LastValue(), horizons_s=(6 * STEP,))
    for n in range(400):
        w = win("a", n, float((n * 7) % 11))
        both.learn_one(w)
        alone.learn_one(w)
    assert both.fitted("a")[6 * STEP] == alone.fitted("a")[6 * STEP]
    assert both.forecast("a", [6 * STEP]) == alone.forecast("a", [6 * STEP])
    assert both.forecast("a", [6 * STEP]) != both.inner.forecast("a", [6 * STEP])


def _brute_fit(resid, spread, act, pairs, level):
    """Per ``(a, c)``: the smallest ``b`` among the scores' own values whose p90 covers
    ``ceil(level (n + 1))`` forecasts (capped at n), or ``-max(shift)`` when p50 alone does;
    and the mean pinball loss of that p90. Plain Python, one candidate at a time."""
    n = len(resid)
    need = min(math.ceil(level * (n + 1)), n)
    out = []
    for a, c in pairs:
        shift = [a * s + c * x for s, x in zip(spread, act, strict=True)]

        def covered(b, shift=shift):
            # (1e-9: b = r - sh may come back a rounding below r - sh when added to sh)
            return sum(r <= max(sh + b, 0.0) + 1e-9 for r, sh in zip(resid, shift, strict=True))

        if sum(r <= 0 for r in resid) >= need:
            b = -max(shift)
        else:
            b = min(r - sh for r, sh in zip(resid, shift, strict=True) if covered(r - sh) >= need)
        diffs = [r - max(sh + b, 0.0) for r, sh in zip(resid, shift, strict=True)]
        loss = sum(level * d if d >= 0 else (level - 1) * d for d in diffs) / n
        out.append((b, loss))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_fit_with_activity_matches_a_brute_force_search(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(5, 60)
    resid = [rng.choice([0.0, 0.0, -1.0, rng.uniform(-3, 8)]) for _ in range(n)]
    spread = [rng.uniform(0, 4) for _ in range(n)]
    act = [rng.choice([0.0, rng.uniform(0, 3)]) for _ in range(n)]
    a_w, c_w = [0.0, 0.5, 1.5], [0.0, 1.0, 4.0]
    level = rng.choice([0.5, 0.8, 0.9])
    b, loss = fit_affine(
        resid, spread, np.array(a_w), level, level, activity=act, activity_weights=np.array(c_w)
    )
    ref = _brute_fit(resid, spread, act, [(a, c) for a in a_w for c in c_w], level)
    assert b.tolist() == pytest.approx([r[0] for r in ref])
    assert loss.tolist() == pytest.approx([r[1] for r in ref])


def _bursts(n_blocks: int, seed: int = 5) -> list[float]:
    """Quiet stretches (demand holds at 10) and bursts (demand jumps around above it)."""
    rng = random.Random(seed)
    out: list[float] = []
    for _ in range(n_blocks):
        out += [10.0] * 100
        out += [10.0 + abs(rng.gauss(0.0, 5.0)) for _ in range(50)]
    return out


def test_recent_movement_sets_the_headroom_where_the_inner_spread_cannot() -> None:
    """``Fixed`` says the same p90 in quiet stretches and in bursts; the activity term lets
    the calibrated p90 hold no headroom while demand holds still and more while it jumps,
    at the same coverage and a lower pinball loss (both counted here)."""
    series = _bursts(30)
    runs = {}
    for name, weights in (("with", (0.0, 0.5, 1.0, 2.0, 4.0)), ("without", (0.0,))):
        m = Calibrated(Fixed(), horizons_s=(STEP,), activity_weights=weights)
        p90s: list[float] = []
        loss = hits = count = 0.0
        for n, y in enumerate(series):
            if p90s and n > 1500:
                loss += _loss(y, p90s[-1])
                hits += y <= p90s[-1]
                count += 1
            m.learn_one(win("a", n, y))
            p90s.append(m.forecast("a", [STEP])[STEP][1])
        runs[name] = {"p90": p90s, "loss": loss / count, "coverage": hits / count}
    for run in runs.values():
        assert 0.87 <= run["coverage"] <= 0.93
    assert runs["with"]["loss"] < 0.8 * runs["without"]["loss"]
    quiet = [n for n in range(3000, len(series)) if n % 150 in range(60, 99)]
    burst = [n for n in range(3000, len(series)) if n % 150 in range(110, 149)]
    with_p90 = runs["with"]["p90"]
    assert max(with_p90[n] for n in quiet) < 10.5  # holds (almost) nothing back
    assert sum(with_p90[n] for n in burst) / len(burst) > 14.0  # and more while it jumps
    assert min(runs["without"]["p90"][n] for n in quiet) > 12.0  # one headroom for all


def test_a_state_written_before_the_activity_term_loads() -> None:
    """A checkpoint of the earlier layout (fits ``[a, b]``, three score arrays, pending
    forecasts without activity) forecasts exactly as it did, then keeps learning."""
    saved = json.loads((Path(__file__).parent / "data" / "calibration_state_v1.json").read_text())
    settings = {k: tuple(v) if isinstance(v, list) else v for k, v in saved["settings"].items()}
    m = Calibrated(LastValue(), **settings)
    m.load_state_dict(saved["state"])
    for tenant, fc in saved["forecast"].items():
        got = m.forecast(tenant, [float(h) for h in fc])
        assert {str(h): v for h, v in got.items()} == {h: tuple(v) for h, v in fc.items()}
    for n in range(60, 80):
        m.learn_one(win("a", n, 10.0 + 4 * (n % 3 == 0)))
    assert set(m.fitted("a")[STEP]) == {"a", "b", "c"}
    again = Calibrated(LastValue(), **settings)
    again.load_state_dict(m.state_dict())
    assert again.forecast("a", [STEP, 3 * STEP]) == m.forecast("a", [STEP, 3 * STEP])


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="level"):
        Calibrated(LastValue(), level=1.0)
    with pytest.raises(ValueError, match="spread_weights"):
        Calibrated(LastValue(), spread_weights=())
    with pytest.raises(ValueError, match="activity_weights"):
        Calibrated(LastValue(), activity_weights=(-1.0,))
    with pytest.raises(ValueError, match="activity_halflife"):
        Calibrated(LastValue(), activity_halflife=0.0)
