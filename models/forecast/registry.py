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
  windows (a reference without learning, also in the baselines module);
- ``dprobe-mmoe-jobs``: the same model with the job-aware forecaster's expectations as
  inputs (``job_inputs``);
- ``job-aware``: demand from the tenant's jobs, what still runs + what waits + what
  arrives and still runs (:mod:`~dprobe.models.forecast.job_aware`; windows without a
  job flow are forecast as the last value).

Settings are passed to the model's constructor by name, so a test or a benchmark can make
a smaller one: ``make_forecaster("holt-winters", season_s=3600.0)``. With
``calibrate=True`` the model comes wrapped in
:class:`~dprobe.models.forecast.calibration.Calibrated` (online-calibrated p90, same name,
p50 untouched; ``calibration`` passes settings to the wrapper): what the worker, the
simulator and ``dprobe evaluate`` use by default.

Example:
    >>> f = make_forecaster("recent-peak")
    >>> from types import SimpleNamespace as W
    >>> for i, y in enumerate([4.0, 9.0, 6.0]):
    ...     f.learn_one(W(tenant="a", window_end=300.0 * (i + 1), running_gpus=y, pending_gpus=0))
    >>> f.forecast("a", [600.0])
    {600.0: (6.0, 9.0)}
    >>> canonical_name("mmoe")
    'dprobe-mmoe'
    >>> make_forecaster("last-value", calibrate=True).version
    '1+cal2'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MMOE = "dprobe-mmoe"
MMOE_JOBS = "dprobe-mmoe-jobs"
FORECASTERS = (
    MMOE,
    MMOE_JOBS,
    "last-value",
    "moving-average",
    "holt-winters",
    "seasonal-naive",
    "recent-peak",
    "job-aware",
)


ALIASES = {"mmoe": MMOE}


def canonical_name(name: str) -> str:
    """The registry name of ``name`` (an alias resolved); ``ValueError`` if unknown."""
    name = ALIASES.get(name, name)
    if name not in FORECASTERS:
        raise ValueError(f"unknown forecaster {name!r}; choose from {', '.join(FORECASTERS)}")
    return name


def make_forecaster(
    name: str,
    *,
    seed: int = 0,
    calibrate: bool = False,
    calibration: Mapping[str, Any] | None = None,
    gate: bool = False,
    gating: Mapping[str, Any] | None = None,
    **settings: Any,
) -> Any:
    """A fresh forecaster called ``name`` (see module doc), ``settings`` passed to its
    constructor (``seed`` only to the models that draw random numbers), wrapped in the
    online p90 calibration when ``calibrate`` (settings ``calibration``) and in the
    paying gate (:mod:`dprobe.models.forecast.gate`, settings ``gating``) when ``gate``;
    ``ValueError`` if the name is unknown, ``TypeError`` for a setting the model does not
    have."""
    model = _make(name, seed=seed, **settings)
    if calibrate:
        from dprobe.models.forecast.calibration import Calibrated

        model = Calibrated(model, **dict(calibration or {}))
    if gate:
        from dprobe.models.forecast.gate import Gated

        model = Gated(model, **dict(gating or {}))
    return model


def _make(name: str, *, seed: int, **settings: Any) -> Any:
    name = canonical_name(name)
    if name in (MMOE, MMOE_JOBS):
        from dprobe.models.forecast.multitask import MultiTaskForecaster

        return MultiTaskForecaster(seed=seed, job_inputs=name == MMOE_JOBS, **settings)
    if name == "job-aware":
        from dprobe.models.forecast.job_aware import JobAware

        return JobAware(**settings)
    from dprobe.models.forecast import baselines

    classes: dict[str, type[Any]] = {
        "last-value": baselines.LastValue,
        "moving-average": baselines.MovingAverage,
        "holt-winters": baselines.HoltWinters,
        "seasonal-naive": baselines.SeasonalNaive,
        "recent-peak": baselines.RecentPeak,
    }
    return classes[name](**settings)
