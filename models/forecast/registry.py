"""Every forecaster by name, all behind the one contract of
:mod:`dprobe.models.forecast.base` (``learn_one`` / ``forecast``): what the stream
worker's ``model`` setting, the simulator's predictive mode and ``dprobe evaluate`` pick
from.

- ``dprobe-mmoe`` (the name the model reports in evaluation tables and scaling events;
  ``mmoe`` is accepted as an alias): dprobe's multi-task MMoE
  (:class:`~dprobe.models.forecast.multitask.MultiTaskForecaster`), default settings;
- ``last-value``, ``moving-average``, ``holt-winters``, ``seasonal-naive``: the baselines
  of :mod:`dprobe.models.forecast.baselines`;
- ``recent-peak``: p50 = the last window's demand, p90 = the highest of the last ``k``
  windows (a small reference model kept here for tests; no learning).

Example:
    >>> f = make_forecaster("recent-peak")
    >>> from types import SimpleNamespace as W
    >>> for i, y in enumerate([4.0, 9.0, 6.0]):
    ...     f.learn_one(W(tenant="a", window_end=300.0 * i, running_gpus=y, pending_gpus=0.0))
    >>> f.forecast("a", [600.0])
    {600.0: (6.0, 9.0)}
    >>> canonical_name("mmoe")
    'dprobe-mmoe'
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

MMOE = "dprobe-mmoe"
FORECASTERS = (
    MMOE,
    "last-value",
    "moving-average",
    "holt-winters",
    "seasonal-naive",
    "recent-peak",
)


class RecentPeak:
    """p50 = last demand, p90 = max demand of the last ``k`` windows, at every horizon."""

    name = "recent-peak"
    version = "1"

    def __init__(self, k: int = 6) -> None:
        self.k = k
        self._hist: dict[str, deque[float]] = {}

    def learn_one(self, window: Any) -> None:
        y = float(window.running_gpus or 0.0) + float(window.pending_gpus or 0.0)
        self._hist.setdefault(str(window.tenant), deque(maxlen=self.k)).append(y)

    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        h = self._hist.get(tenant)
        p = (h[-1], max(h)) if h else (0.0, 0.0)
        return {float(x): p for x in horizons}

    def state_dict(self) -> dict[str, Any]:
        return {"hist": {t: list(v) for t, v in self._hist.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._hist = {t: deque(v, maxlen=self.k) for t, v in state["hist"].items()}


ALIASES = {"mmoe": MMOE}


def canonical_name(name: str) -> str:
    """The registry name of ``name`` (an alias resolved); ``ValueError`` if unknown."""
    name = ALIASES.get(name, name)
    if name not in FORECASTERS:
        raise ValueError(f"unknown forecaster {name!r}; choose from {', '.join(FORECASTERS)}")
    return name


def make_forecaster(name: str, *, seed: int = 0) -> Any:
    """A fresh forecaster called ``name`` (see module doc); ``ValueError`` if unknown."""
    name = canonical_name(name)
    if name == "recent-peak":
        return RecentPeak()
    if name == MMOE:
        from dprobe.models.forecast.multitask import MultiTaskForecaster

        return MultiTaskForecaster(seed=seed)
    from dprobe.models.forecast import baselines

    classes = {
        "last-value": baselines.LastValue,
        "moving-average": baselines.MovingAverage,
        "holt-winters": baselines.HoltWinters,
        "seasonal-naive": baselines.SeasonalNaive,
    }
    return classes[name]()
