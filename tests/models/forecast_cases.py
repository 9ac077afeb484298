"""Shared test cases for forecasters: a mutable window type, series builders, factories."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dprobe.models.forecast.base import Forecaster
from dprobe.models.forecast.baselines import HoltWinters, LastValue, MovingAverage, SeasonalNaive
from dprobe.models.forecast.multitask import MultiTaskForecaster

STEP = 600.0


@dataclass
class Win:
    """A mutable stand-in for TenantWindow (so a test can see if a model mutated it)."""

    tenant: str
    window_start: float
    window_end: float
    running_gpus: float
    pending_gpus: float = 0.0
    quota_gpus: float | None = None
    effective_demand_gpus: float = 0.0


def win(
    tenant: str, n: int, running: float, pending: float = 0.0, quota: float | None = None
) -> Win:
    """Window number ``n`` (ends at ``(n + 1) * STEP``) of ``tenant``."""
    return Win(tenant, n * STEP, (n + 1) * STEP, running, pending, quota, running + pending)


def wave(tenant: str, n_windows: int, base: float = 32.0, amp: float = 8.0) -> Iterator[Win]:
    """A daily sine wave of demand plus a little pending, one window every ``STEP``."""
    per_day = round(86_400 / STEP)
    for n in range(n_windows):
        y = base + amp * math.sin(2 * math.pi * n / per_day)
        yield win(tenant, n, round(y), pending=float(n % 3), quota=64.0)


def small_mmoe(seed: int = 0) -> MultiTaskForecaster:
    """A small, fast multi-task model for unit tests."""
    return MultiTaskForecaster(
        horizons_s=(600.0, 3600.0),
        k_lags=4,
        expert_hidden=16,
        expert_out=8,
        tower_hidden=8,
        batch_size=32,
        min_rows=16,
        train_every=4,
        buffer_size=500,
        combine_min_rows=16,  # so the online combination is exercised by short streams
        combine_halflife=200.0,
        seed=seed,
    )


FACTORIES: dict[str, Callable[[], Forecaster]] = {
    "last-value": LastValue,
    "seasonal-naive": lambda: SeasonalNaive(season_s=6 * STEP),
    "moving-average": MovingAverage,
    "holt-winters": lambda: HoltWinters(season_s=6 * STEP),
    "dprobe-mmoe": small_mmoe,
}
