"""Baselines against independent references: numpy means, known patterns, coverage."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from dprobe.models.forecast.baselines import HoltWinters, LastValue, MovingAverage, SeasonalNaive

from .forecast_cases import STEP, win


def _feed(model, ys, tenant: str = "a", start: int = 0) -> None:
    for i, y in enumerate(ys):
        model.learn_one(win(tenant, start + i, y))


def test_moving_average_is_the_mean_of_the_last_span() -> None:
    rng = np.random.default_rng(1)
    ys = rng.integers(0, 50, size=40).astype(float)
    m = MovingAverage(span_s=7 * STEP)
    _feed(m, ys.tolist())
    assert m.forecast("a", [STEP])[STEP][0] == pytest.approx(ys[-7:].mean())


def test_seasonal_naive_repeats_the_value_one_season_before_the_target() -> None:
    season = 6
    pattern = [3.0, 9.0, 4.0, 1.0, 7.0, 2.0]
    m = SeasonalNaive(season_s=season * STEP)
    ys = pattern * 3 + [100.0]  # the last value must not leak into the forecast
    _feed(m, ys)
    n_last = len(ys) - 1
    for k in range(1, 2 * season + 1):
        target = n_last + k
        back = target - season * math.ceil(k / season)
        assert m.forecast("a", [k * STEP])[k * STEP][0] == ys[back]


def test_seasonal_naive_falls_back_to_last_value_without_a_season_of_history() -> None:
    m = SeasonalNaive(season_s=144 * STEP)
    _feed(m, [5.0, 6.0, 7.0])
    assert m.forecast("a", [3 * STEP])[3 * STEP][0] == 7.0


def test_holt_winters_without_smoothing_of_trend_and_season_is_last_value() -> None:
    m = HoltWinters(alpha=1.0, beta=0.0, gamma=0.0, season_s=6 * STEP)
    _feed(m, [4.0, 10.0, 3.0, 8.0])
    fc = m.forecast("a", [STEP, 5 * STEP])
    assert fc[STEP][0] == pytest.approx(8.0)
    assert fc[5 * STEP][0] == pytest.approx(8.0)


def test_holt_winters_extrapolates_a_linear_trend() -> None:
    m = HoltWinters(alpha=0.5, beta=0.3, gamma=0.0, phi=1.0, season_s=STEP)
    ys = [10.0 + 2.0 * i for i in range(200)]
    _feed(m, ys)
    assert m.forecast("a", [5 * STEP])[5 * STEP][0] == pytest.approx(ys[-1] + 10.0, rel=1e-3)


def test_holt_winters_learns_a_daily_pattern() -> None:
    per_day = 24
    m = HoltWinters(alpha=0.1, beta=0.0, gamma=0.5, season_s=per_day * STEP)
    pattern = [20.0 + 10.0 * math.sin(2 * math.pi * i / per_day) for i in range(per_day)]
    ys = pattern * 30
    _feed(m, ys)
    n_last = len(ys) - 1
    for k in (3, 6, 12):
        expected = pattern[(n_last + k) % per_day]
        assert m.forecast("a", [k * STEP])[k * STEP][0] == pytest.approx(expected, abs=0.5)


def test_p90_covers_about_ninety_percent_of_a_random_walk() -> None:
    rng = random.Random(3)
    y, ys = 500.0, []
    for _ in range(6000):
        y += rng.gauss(0.0, 2.0)
        ys.append(y)
    m = LastValue()
    hits = n = 0
    for i, v in enumerate(ys[:-4]):
        m.learn_one(win("a", i, v))
        if i > 200:
            _, p90 = m.forecast("a", [4 * STEP])[4 * STEP]
            hits += ys[i + 4] <= p90
            n += 1
    assert 0.86 <= hits / n <= 0.94


def test_tenants_do_not_share_state() -> None:
    for make in (LastValue, MovingAverage, lambda: SeasonalNaive(season_s=4 * STEP), HoltWinters):
        m = make()
        _feed(m, [5.0] * 10, tenant="a")
        before = m.forecast("a", [STEP, 4 * STEP])
        _feed(m, [50.0, 0.0, 70.0] * 5, tenant="b")
        assert m.forecast("a", [STEP, 4 * STEP]) == before
