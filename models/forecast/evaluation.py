"""Rolling-origin evaluation of forecasters on a stream of closed windows.

Every model sees the windows in time order, exactly as the stream worker would: it learns
window ``n``, then (if ``n`` lies in the test span and on the origin stride) forecasts
each horizon from there. Forecasts are scored against the demand of the window that ends
``horizon`` seconds later (rounded to whole windows; a horizon shorter than half a window
is not scored). Data before ``test_start`` only warms the models up (fit);
tuning must use a validation span that also ends before it. Online models keep learning
during the test span from windows that have closed - never from the future.

A forecast whose target window does not exist is not scored, unless ``absent_is_zero``
(windows of a job log, where a tenant without jobs has no window): then it is scored
against 0 as long as the target lies within the windows seen.

Metrics per model and horizon, over the same (tenant, origin) pairs for every model:
MAE, RMSE, MASE = MAE / MAE of last value (below 1 beats "same as now"),
``under_rate`` = share of p50 forecasts below the actual demand, ``p90_under_rate``
(what a planner that grants p90 would miss), ``p90_coverage`` = share of actuals at or
below p90 (0.9 for a calibrated p90), ``pinball_p90`` = mean quantile loss at 0.9 in GPUs,
``max(0.9 (y - p90), 0.1 (p90 - y))`` (lower is better: it rewards coverage and a tight
p90 at once), and ``n``. A model wrapped in
:class:`~dprobe.models.forecast.calibration.Calibrated` is scored as it forecasts
(calibrated p90), and its inner model's p90 on the same pairs gives
``p90_coverage_uncalibrated`` / ``pinball_p90_uncalibrated`` (None for other models).

Example:
    >>> from types import SimpleNamespace as W
    >>> from dprobe.models.forecast.baselines import LastValue, MovingAverage
    >>> ws = [W(tenant="a", window_start=600.0 * i, window_end=600.0 * (i + 1),
    ...         running_gpus=float(i % 2), pending_gpus=0.0) for i in range(20)]
    >>> models = [LastValue(), MovingAverage(span_s=1200)]
    >>> res = rolling_origin(ws, models, [600.0], test_start=6000.0)
    >>> [(r.model, r.mase) for r in res.rows]
    [('last-value', 1.0), ('moving-average', 0.5)]
    >>> pinball_p90(5.0, 2.0), round(pinball_p90(2.0, 5.0), 9)  # 3 above costs 9 x 3 below
    (2.7, 0.3)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dprobe.models.forecast.base import Forecaster
from dprobe.models.forecast.calibration import Calibrated
from dprobe.models.forecast.quantile_loss import pinball
from dprobe.models.forecast.target import demand_of, window_step_s

REFERENCE = "last-value"
# (tenant, target window index, target time, p50, p90, uncalibrated p90 or NaN)
Pred = tuple[str, int, float, float, float, float]


@dataclass(frozen=True)
class MetricRow:
    """One model at one horizon on the test span."""

    model: str
    horizon_s: float
    mae: float
    rmse: float
    mase: float
    under_rate: float
    p90_under_rate: float
    n: int
    p90_coverage: float = math.nan
    pinball_p90: float = math.nan
    calibrated: bool = False
    p90_coverage_uncalibrated: float | None = None
    pinball_p90_uncalibrated: float | None = None

    def public(self) -> dict[str, Any]:
        """The row as ``dprobe evaluate --json`` prints it."""
        return {
            "model": self.model,
            "horizon_s": self.horizon_s,
            "mae": self.mae,
            "rmse": self.rmse,
            "mase": self.mase,
            "under_rate": self.under_rate,
            "p90_coverage": self.p90_coverage,
            "pinball_p90": self.pinball_p90,
            "calibrated": self.calibrated,
            "p90_coverage_uncalibrated": self.p90_coverage_uncalibrated,
            "pinball_p90_uncalibrated": self.pinball_p90_uncalibrated,
        }


def pinball_p90(actual: float, p90: float) -> float:
    """Quantile (pinball) loss of ``p90`` at level 0.9 for the outcome ``actual``, in GPUs."""
    return pinball(actual - p90, 0.9)


@dataclass
class EvalResult:
    """Rows, and for plots ``series[(model, tenant, h)] = [(t, p50, p90, actual), ...]``."""

    rows: list[MetricRow]
    series: dict[tuple[str, str, float], list[tuple[float, float, float, float]]] = field(
        default_factory=dict
    )
    n_windows: int = 0
    fit_span: tuple[float, float] | None = None
    test_span: tuple[float, float] | None = None


def rolling_origin(
    windows: Iterable[Any],
    models: Sequence[Forecaster],
    horizons_s: Sequence[float],
    *,
    test_start: float,
    origin_stride: int = 1,
    progress: Callable[[int], None] | None = None,
    absent_is_zero: bool = False,
) -> EvalResult:
    """Feed ``windows`` (time-ordered) to every model; score forecasts from test origins.

    ``absent_is_zero``: a tenant with no window for a target time within the windows seen
    had no demand then (windows built from a job log exist only while the tenant has
    jobs), so the forecast is scored against 0; otherwise such a forecast is not scored
    (a series with gaps)."""
    actual: dict[tuple[str, int], float] = {}
    preds: dict[tuple[str, float], list[Pred]] = {}
    step_of: dict[str, float] = {}
    count: dict[str, int] = {}
    first = last = math.nan
    fit_end = math.nan
    n_windows = 0
    for w in windows:
        tenant = str(w.tenant)
        step = step_of.setdefault(tenant, window_step_s(w))
        end = float(w.window_end)
        idx = round(end / step)
        actual[(tenant, idx)] = demand_of(w)
        first = end if math.isnan(first) else first
        last = end
        n_windows += 1
        for m in models:
            m.learn_one(w)
        if end < test_start:
            fit_end = end
            continue
        k = count[tenant] = count.get(tenant, -1) + 1
        if k % origin_stride:
            continue
        for m in models:
            fc = m.forecast(tenant, horizons_s)
            inner = uncalibrated(m)
            raw = inner.forecast(tenant, horizons_s) if inner is not None else None
            for h in horizons_s:
                ahead = round(h / step)
                if ahead < 1:  # shorter than a window: no later window to score against
                    continue
                p50, p90 = fc[h]
                p90_raw = raw[h][1] if raw is not None else math.nan
                preds.setdefault((m.name, h), []).append(
                    (tenant, idx + ahead, end + h, p50, p90, p90_raw)
                )
        if progress is not None and n_windows % 1000 == 0:
            progress(n_windows)
    names = [m.name for m in models]
    calibrated = {m.name for m in models if uncalibrated(m) is not None}
    if absent_is_zero and not math.isnan(last):
        for (_, _), made in preds.items():
            for tenant, target, t, *_ in made:
                if t <= last + 1e-6:
                    actual.setdefault((tenant, target), 0.0)
    rows, series = _score(preds, actual, names, horizons_s, calibrated)
    test_span = (test_start, last) if not math.isnan(last) and last >= test_start else None
    fit_span = (first, fit_end) if not math.isnan(fit_end) else None
    return EvalResult(rows, series, n_windows, fit_span, test_span)


def uncalibrated(model: Any) -> Forecaster | None:
    """The inner model of a calibrated forecaster (whose p90 is scored "before"), else None."""
    return model.inner if isinstance(model, Calibrated) else None


def _score(
    preds: dict[tuple[str, float], list[Pred]],
    actual: dict[tuple[str, int], float],
    names: list[str],
    horizons_s: Sequence[float],
    calibrated: set[str],
) -> tuple[list[MetricRow], dict[tuple[str, str, float], list[tuple[float, float, float, float]]]]:
    rows: list[MetricRow] = []
    series: dict[tuple[str, str, float], list[tuple[float, float, float, float]]] = {}
    for h in horizons_s:
        # score every model on the same pairs: those whose target window exists
        mae_by_model: dict[str, float] = {}
        stats: dict[str, list[float]] = {}
        for name in names:
            # abs, squared, p50 under, p90 under, p90 covers, pinball, and the same two raw
            acc = [0.0] * 8
            n = 0
            for tenant, target, t, p50, p90, p90_raw in preds.get((name, h), []):
                y = actual.get((tenant, target))
                if y is None:
                    continue
                err = p50 - y
                acc[0] += abs(err)
                acc[1] += err * err
                acc[2] += p50 < y
                acc[3] += p90 < y
                acc[4] += y <= p90
                acc[5] += pinball_p90(y, p90)
                acc[6] += y <= p90_raw
                acc[7] += pinball_p90(y, p90_raw) if not math.isnan(p90_raw) else 0.0
                n += 1
                series.setdefault((name, tenant, h), []).append((t, p50, p90, y))
            if n:
                mae_by_model[name] = acc[0] / n
                stats[name] = [a / n for a in acc] + [n]
        ref = mae_by_model.get(REFERENCE)
        for name in names:
            if name not in stats:
                continue
            mae, mse, ur, ur90, cover, loss, cover_raw, loss_raw, count = stats[name]
            if ref is None:
                mase = math.nan
            elif ref > 0:
                mase = mae / ref
            else:
                mase = 1.0 if mae == 0 else math.inf
            cal = name in calibrated
            rows.append(
                MetricRow(
                    name,
                    float(h),
                    mae,
                    math.sqrt(mse),
                    mase,
                    ur,
                    ur90,
                    int(count),
                    p90_coverage=cover,
                    pinball_p90=loss,
                    calibrated=cal,
                    p90_coverage_uncalibrated=cover_raw if cal else None,
                    pinball_p90_uncalibrated=loss_raw if cal else None,
                )
            )
    return rows, series
