"""Shared test cases for forecasters: a mutable window type, series builders, small models."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dprobe.models.forecast.base import Forecaster
from dprobe.models.forecast.multitask import MultiTaskForecaster
from dprobe.models.forecast.registry import MMOE, MMOE_JOBS, make_forecaster

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


# Settings that make a registered forecaster small and quick enough for unit tests (the
# rest run with their defaults). Every forecaster of the registry is tested; a name here
# that the registry does not know fails the conformance suite.
SMALL_SETTINGS: dict[str, dict[str, Any]] = {
    MMOE: {
        "horizons_s": (600.0, 3600.0),
        "k_lags": 4,
        "expert_hidden": 16,
        "expert_out": 8,
        "tower_hidden": 8,
        "batch_size": 32,
        "min_rows": 16,
        "train_every": 4,
        "buffer_size": 500,
        "combine_min_rows": 16,  # so the online combination is exercised by short streams
        "combine_halflife": 200.0,
    },
    "seasonal-naive": {"season_s": 6 * STEP},
    "holt-winters": {"season_s": 6 * STEP},
}
SMALL_SETTINGS[MMOE_JOBS] = SMALL_SETTINGS[MMOE]


def small(name: str, seed: int = 0, *, calibrated: bool = False) -> Forecaster:
    """The registered forecaster ``name``, made small for unit tests; when ``calibrated``,
    wrapped as the worker runs it: the online p90 calibration (default settings) and the
    paying gate (scoring at 600 s, deciding after 3 scores so tests reach it)."""
    return make_forecaster(
        name,
        seed=seed,
        calibrate=calibrated,
        gate=calibrated,
        gating={"horizon_s": 600.0, "min_scores": 3},
        **SMALL_SETTINGS.get(name, {}),
    )


def small_mmoe(seed: int = 0) -> MultiTaskForecaster:
    """A small, fast multi-task model for unit tests."""
    model: MultiTaskForecaster = small(MMOE, seed)
    return model
