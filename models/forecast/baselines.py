"""Baseline forecasters: last value, seasonal naive, moving average, Holt-Winters, and the
recent peak (a reference with a p90 of its own: the highest recent demand).

Each is a :class:`~dprobe.models.forecast.per_tenant.PerTenantForecaster`: one state per
tenant, learned online one window at a time, p90 from the tracked spread of changes.
Missing windows are tolerated: state advances by the number of steps that passed.

Example:
    >>> from types import SimpleNamespace as W
    >>> m = MovingAverage(span_s=1800)
    >>> for i, y in enumerate([4.0, 8.0, 6.0]):
    ...     m.learn_one(W(tenant="a", window_start=600 * i, window_end=600 * (i + 1),
    ...                   running_gpus=y, pending_gpus=0.0))
    >>> m.forecast("a", [3600])[3600][0]
    6.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dprobe.models.forecast.per_tenant import PerTenantForecaster

DAY_S = 86_400.0


class LastValue(PerTenantForecaster):
    """ "Same as now": the demand of the last window, at every horizon (the MASE reference).

    >>> LastValue().name
    'last-value'
    """

    name = "last-value"
    version = "1"

    def __init__(self, *, spread_z: float = 1.2816, spread_alpha: float = 0.05) -> None:
        super().__init__(spread_z=spread_z, spread_alpha=spread_alpha)


class SeasonalNaive(PerTenantForecaster):
    """The demand one season (default a day) before the target time; last value until then.

    >>> SeasonalNaive(season_s=3600).season_s
    3600
    """

    name = "seasonal-naive"
    version = "1"

    def __init__(
        self, *, season_s: float = DAY_S, spread_z: float = 1.2816, spread_alpha: float = 0.05
    ) -> None:
        super().__init__(spread_z=spread_z, spread_alpha=spread_alpha)
        self.season_s = season_s

    def prototype(self, step_s: float) -> dict[str, Any]:
        return {
            "hist": {},
            "last_idx": 0,
            "last": 0.0,
            "season_steps": max(round(self.season_s / step_s), 1),
        }

    def update(self, state: dict[str, Any], idx: int, y: float, gap: int) -> None:
        hist: dict[str, float] = state["hist"]
        hist[str(idx)] = y
        state["last_idx"], state["last"] = idx, y
        # keep one season (plus slack) of history; keys are str so the state is JSON-able
        keep = self._season_steps(state) + 2
        if len(hist) > keep:
            for key in [k for k in hist if int(k) <= idx - keep]:
                del hist[key]

    def _season_steps(self, state: dict[str, Any]) -> int:
        return max(int(state.get("season_steps", 0)), 1)

    def point(self, state: dict[str, Any], steps: float, last: float) -> float:
        target = state["last_idx"] + round(steps)
        season = self._season_steps(state)
        back = (
            target - season * math.ceil((target - state["last_idx"]) / season)
            if steps > 0
            else target
        )
        value = state["hist"].get(str(back))
        return float(value) if value is not None else float(state["last"])


class MovingAverage(PerTenantForecaster):
    """The mean demand of the windows of the last ``span_s`` seconds, at every horizon."""

    name = "moving-average"
    version = "1"

    def __init__(
        self, *, span_s: float = 3600.0, spread_z: float = 1.2816, spread_alpha: float = 0.05
    ) -> None:
        super().__init__(spread_z=spread_z, spread_alpha=spread_alpha)
        self.span_s = span_s

    def prototype(self, step_s: float) -> dict[str, Any]:
        return {"recent": [], "steps": max(round(self.span_s / step_s), 1)}

    def update(self, state: dict[str, Any], idx: int, y: float, gap: int) -> None:
        recent: list[list[float]] = state["recent"]
        recent.append([idx, y])
        span_steps = state["steps"]
        while recent and recent[0][0] <= idx - span_steps:
            recent.pop(0)

    def point(self, state: dict[str, Any], steps: float, last: float) -> float:
        recent = state["recent"]
        return sum(y for _, y in recent) / len(recent)


class HoltWinters(PerTenantForecaster):
    """Additive Holt-Winters with a damped trend and a daily season, updated online.

    ``alpha``/``beta``/``gamma`` smooth level/trend/season, ``phi`` damps the trend so
    six-hour forecasts do not run away. Missing windows advance the season index. The
    season starts at zero and is learned as days pass.
    """

    name = "holt-winters"
    version = "1"

    def __init__(
        self,
        *,
        alpha: float = 0.3,
        beta: float = 0.01,
        gamma: float = 0.1,
        phi: float = 0.98,
        season_s: float = DAY_S,
        spread_z: float = 1.2816,
        spread_alpha: float = 0.05,
    ) -> None:
        super().__init__(spread_z=spread_z, spread_alpha=spread_alpha)
        self.alpha = alpha
        self.beta = beta
        self.gamma = gamma
        self.phi = phi
        self.season_s = season_s

    def prototype(self, step_s: float) -> dict[str, Any]:
        m = max(round(self.season_s / step_s), 1)
        return {"level": None, "trend": 0.0, "season": [0.0] * m if m > 1 else [], "idx": 0}

    def update(self, state: dict[str, Any], idx: int, y: float, gap: int) -> None:
        season: list[float] = state["season"]
        m = len(season)
        if state["level"] is None:
            state["level"], state["idx"] = y, idx
            return
        level, trend = state["level"], state["trend"]
        # advance over missing windows with the damped trend
        for _ in range(max(gap - 1, 0)):
            level += self.phi * trend
            trend *= self.phi
        s = season[idx % m] if m else 0.0
        prev = level + self.phi * trend
        new_level = self.alpha * (y - s) + (1 - self.alpha) * prev
        new_trend = self.beta * (new_level - level) + (1 - self.beta) * self.phi * trend
        if m:
            season[idx % m] = self.gamma * (y - new_level) + (1 - self.gamma) * s
        state["level"], state["trend"], state["idx"] = new_level, new_trend, idx

    def point(self, state: dict[str, Any], steps: float, last: float) -> float:
        h = max(round(steps), 0)
        damp = sum(self.phi**i for i in range(1, h + 1)) if self.phi != 1 else float(h)
        season = state["season"]
        s = season[(state["idx"] + h) % len(season)] if season else 0.0
        return float(state["level"] + damp * state["trend"] + s)


class RecentPeak(PerTenantForecaster):
    """p50 = the last window's demand, p90 = the highest demand of the windows of the last
    ``k`` steps, at every horizon (no learning beyond that; a reference for the planner).

    >>> from types import SimpleNamespace as W
    >>> m = RecentPeak(k=6)
    >>> for i, y in enumerate([4.0, 9.0, 6.0]):
    ...     m.learn_one(W(tenant="a", window_end=300.0 * (i + 1), running_gpus=y, pending_gpus=0))
    >>> m.forecast("a", [600.0])
    {600.0: (6.0, 9.0)}
    """

    name = "recent-peak"
    version = "2"

    def __init__(self, *, k: int = 6) -> None:
        super().__init__()
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k

    def prototype(self, step_s: float) -> dict[str, Any]:
        return {"recent": []}

    def update(self, state: dict[str, Any], idx: int, y: float, gap: int) -> None:
        recent: list[list[float]] = state["recent"]
        recent.append([idx, y])
        while recent[0][0] <= idx - self.k:
            recent.pop(0)

    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        """``{horizon_s: (last, recent peak)}``; an unseen tenant gets ``(0.0, 0.0)``."""
        state = self._tenants.get(tenant)
        if state is None:
            return dict.fromkeys(horizons, (0.0, 0.0))
        last = float(state["y"])
        peak = max([last, *(y for _, y in state["m"]["recent"])])
        return dict.fromkeys(horizons, (last, peak))
