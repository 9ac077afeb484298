"""Rolling-origin evaluation: metrics against hand computation, no look-ahead, split."""

from __future__ import annotations

import math
import random

import pytest

from dprobe.models.forecast.baselines import LastValue, MovingAverage, RecentPeak, SeasonalNaive
from dprobe.models.forecast.evaluation import rolling_origin

from .forecast_cases import STEP, win


class Oracle:
    """Knows the series in advance (to check the scoring), but records what it learned."""

    name = "oracle"
    version = "1"

    def __init__(self, series: dict[int, float]) -> None:
        self.series = series
        self.learned: list[float] = []
        self.asked_after: list[float] = []

    def learn_one(self, window) -> None:
        self.learned.append(window.window_end)

    def forecast(self, tenant, horizons):
        now = self.learned[-1]
        self.asked_after.append(now)
        return {h: (self.series.get(round((now + h) / STEP) - 1, 0.0),) * 2 for h in horizons}

    def state_dict(self):
        return {}

    def load_state_dict(self, state) -> None:
        pass


def test_metrics_match_hand_computation() -> None:
    ys = [0.0, 2.0, 1.0, 5.0, 4.0, 4.0]
    windows = [win("a", i, y) for i, y in enumerate(ys)]
    # origins from window 2 on (end = 3 * STEP); horizon 1 window
    res = rolling_origin(windows, [LastValue()], [STEP], test_start=3 * STEP)
    (row,) = res.rows
    errors = [ys[i] - ys[i + 1] for i in range(2, 5)]  # forecast y[i], actual y[i+1]
    assert row.n == 3
    assert row.mae == pytest.approx(sum(abs(e) for e in errors) / 3)
    assert row.rmse == pytest.approx(math.sqrt(sum(e * e for e in errors) / 3))
    assert row.mase == 1.0
    assert row.under_rate == pytest.approx(1 / 3)  # only 1 -> 5 was under-forecast


def test_oracle_scores_zero_and_never_sees_the_future() -> None:
    ys = {i: float((i * 7) % 5) for i in range(50)}
    windows = [win("a", i, y) for i, y in ys.items()]
    oracle = Oracle(ys)
    res = rolling_origin(windows, [LastValue(), oracle], [STEP, 3 * STEP], test_start=20 * STEP)
    rows = {(r.model, r.horizon_s): r for r in res.rows}
    assert rows[("oracle", STEP)].mae == 0.0 and rows[("oracle", STEP)].mase == 0.0
    assert rows[("oracle", 3 * STEP)].under_rate == 0.0
    # every forecast was asked right after learning the origin window, never later
    assert oracle.asked_after == sorted(oracle.asked_after)
    assert min(oracle.asked_after) >= 20 * STEP
    assert res.fit_span == (STEP, 19 * STEP)
    assert res.test_span == (20 * STEP, 50 * STEP)


def test_all_models_are_scored_on_the_same_pairs_and_stride() -> None:
    windows = [win("a", i, float(i % 3)) for i in range(60)]
    windows += [win("b", i, 5.0) for i in range(30, 60)]
    windows.sort(key=lambda w: w.window_end)
    models = [LastValue(), MovingAverage(span_s=2 * STEP), SeasonalNaive(season_s=3 * STEP)]
    res = rolling_origin(windows, models, [2 * STEP], test_start=40 * STEP, origin_stride=2)
    ns = {r.model: r.n for r in res.rows}
    assert len(set(ns.values())) == 1
    # windows 39..59 end at or after test_start; every 2nd of them per tenant (39, 41, ..
    # 59) is an origin, and a target 2 windows later exists up to origin 57: 10 per tenant
    assert ns["last-value"] == 10 + 10
    mase = {r.model: r.mase for r in res.rows}
    assert mase["seasonal-naive"] == 0.0  # period-3 series, season of 3 windows


def test_horizon_shorter_than_a_window_is_not_scored() -> None:
    windows = [win("a", i, float(i % 2)) for i in range(30)]
    res = rolling_origin(windows, [LastValue()], [STEP / 4, STEP], test_start=10 * STEP)
    assert [r.horizon_s for r in res.rows] == [STEP]


def test_p90_coverage_and_pinball_match_hand_computation() -> None:
    from dprobe.models.forecast.evaluation import pinball_p90

    ys = [0.0, 2.0, 1.0, 5.0, 4.0, 4.0, 9.0]
    windows = [win("a", i, y) for i, y in enumerate(ys)]
    model = RecentPeak(k=2)  # p90 = the higher of the last two windows
    (row,) = rolling_origin(windows, [model], [STEP], test_start=3 * STEP).rows
    pairs = [(max(ys[i - 1], ys[i]), ys[i + 1]) for i in range(2, 6)]  # (p90, actual)
    assert row.p90_coverage == pytest.approx(sum(y <= q for q, y in pairs) / 4)  # 2 of 4
    losses = [0.9 * (y - q) if y > q else 0.1 * (q - y) for q, y in pairs]
    assert row.pinball_p90 == pytest.approx(sum(losses) / 4)
    assert pinball_p90(5.0, 2.0) == pytest.approx(2.7)
    assert not row.calibrated and row.p90_coverage_uncalibrated is None


def test_a_calibrated_model_is_also_scored_as_its_uncalibrated_self() -> None:
    from dprobe.models.forecast.calibration import Calibrated

    rng = random.Random(5)
    ys = [float(rng.randint(0, 20)) for _ in range(400)]
    windows = [win("a", i, y) for i, y in enumerate(ys)]
    plain = rolling_origin(windows, [LastValue()], [STEP, 6 * STEP], test_start=200 * STEP)
    cal = rolling_origin(
        windows, [Calibrated(LastValue())], [STEP, 6 * STEP], test_start=200 * STEP
    )
    for p, c in zip(plain.rows, cal.rows, strict=True):
        assert c.calibrated and c.mae == p.mae  # p50 untouched
        assert c.p90_coverage_uncalibrated == pytest.approx(p.p90_coverage)
        assert c.pinball_p90_uncalibrated == pytest.approx(p.pinball_p90)
        assert 0.85 <= c.p90_coverage <= 0.95


def test_a_tenant_without_a_window_had_no_demand_when_windows_come_from_a_job_log() -> None:
    # tenant a runs 8 GPUs in windows 0-3, nothing in 4-5 (no window), 8 again in 6-9;
    # tenant b is busy throughout, so the windows cover the whole span
    a = dict.fromkeys((*range(4), *range(6, 10)), 8.0)
    windows = sorted(
        [win("a", i, y) for i, y in a.items()] + [win("b", i, 1.0) for i in range(10)],
        key=lambda w: (w.window_end, w.tenant),
    )
    gaps = rolling_origin(windows, [LastValue()], [STEP], test_start=STEP)
    zeros = rolling_origin(windows, [LastValue()], [STEP], test_start=STEP, absent_is_zero=True)
    # reference in plain Python: last value forecasts the origin's demand for the next window
    demand = {("a", i): a.get(i, 0.0) for i in range(10)} | {("b", i): 1.0 for i in range(10)}
    origins = {(w.tenant, round(w.window_end / STEP) - 1) for w in windows}
    pairs = [(t, i) for t, i in demand if i < 9 and (t, i) in origins]
    errors = [abs(demand[(t, i)] - demand[(t, i + 1)]) for t, i in pairs]
    (row,) = zeros.rows
    assert row.n == len(pairs) == 16
    assert row.mae == pytest.approx(sum(errors) / len(errors))  # the drop to 0 at window 4
    (skipped,) = gaps.rows
    assert skipped.n == 15 and skipped.mae == 0.0  # without it, the miss goes unscored
