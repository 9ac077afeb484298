"""The closing summary of a demo run: counts, consumer lag and forecast error.

Forecast error pairs each forecast made at a window end ``T`` for horizon ``h`` with the
demand of the window that ends at ``T + h`` (the first that ends after it, as the worker
scores a horizon that is no whole number of windows), and compares it with the last-value
baseline (the demand at ``T``), as ``dprobe evaluate`` does: a ratio below 1 means the
model beat "tomorrow looks like today". p90 coverage is that of the p90 the worker
published: calibrated online by default (the scaling events' model version then ends in
``+cal...``; :mod:`dprobe.models.forecast.calibration`), and the line says so.

Example:
    >>> rec = Recording(demand={"vc-a": {600.0: 4.0, 1200.0: 6.0, 1800.0: 5.0}},
    ...                 forecasts={"vc-a": {600.0: {600.0: (5.5, 7.0), 1200.0: (5.0, 6.0)}}})
    >>> errors = forecast_errors(rec)
    >>> errors[0].horizon_s, errors[0].pairs, errors[0].mae, errors[0].last_value_mae
    (600.0, 2, 0.25, 1.5)
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from datetime import UTC, datetime

from dprobe.count_text import count_of
from dprobe.demo.record import Recording
from dprobe.event_line import format_duration


@dataclass(frozen=True)
class HorizonError:
    """Forecast error at one horizon over every scored (tenant, window) pair."""

    horizon_s: float
    pairs: int
    mae: float  # mean |p50 - actual| in GPUs
    last_value_mae: float  # mean |demand at T - actual|
    p90_coverage: float  # share of actuals at or below p90

    @property
    def ratio(self) -> float:
        """MAE relative to last value (< 1: better than the baseline; NaN without one)."""
        return self.mae / self.last_value_mae if self.last_value_mae > 0 else math.nan


@dataclass(frozen=True)
class Summary:
    """The figures of one run."""

    tenants: int
    windows: int
    first_end: float | None
    last_end: float | None
    forecasts: int
    horizons: tuple[float, ...]
    events: int
    scale_up: int
    scale_down: int
    plans: int
    duplicates: int
    lost_snapshots: int
    late_partials: int | None
    snapshots: int
    lag_peak: float | None
    lag_last: float | None
    errors: tuple[HorizonError, ...]
    p90_calibrated: bool | None = None  # None: no scaling event said which model ran
    dead_letters: dict[str, int] | None = None  # by reason; None: never scraped


def calibrated_p90(rec: Recording) -> bool | None:
    """Whether the worker's p90 was calibrated online, from its scaling events' model
    version (``None`` without events).

    >>> calibrated_p90(Recording()) is None
    True
    """
    versions = {str(ev.model.version) for ev in rec.events if getattr(ev, "model", None)}
    if not versions:
        return None
    return any("+cal" in v for v in versions)


def forecast_errors(rec: Recording) -> list[HorizonError]:
    """Scored forecasts per horizon, shortest horizon first (horizons with no pair left out)."""
    acc: dict[float, list[tuple[float, float, float, float]]] = {}
    for tenant, by_horizon in rec.forecasts.items():
        demand = rec.demand.get(tenant, {})
        ends = sorted(demand)
        for horizon, made in by_horizon.items():
            for at, (p50, p90) in made.items():
                k = bisect.bisect_left(ends, at + horizon - 1e-6)  # the first at or after it
                now = demand.get(at)
                if k == len(ends) or now is None:
                    continue
                actual = demand[ends[k]]
                acc.setdefault(horizon, []).append((p50, p90, actual, now))
    out = []
    for horizon in sorted(acc):
        rows = acc[horizon]
        n = len(rows)
        out.append(
            HorizonError(
                horizon_s=horizon,
                pairs=n,
                mae=sum(abs(p50 - a) for p50, _, a, _ in rows) / n,
                last_value_mae=sum(abs(now - a) for _, _, a, now in rows) / n,
                p90_coverage=sum(a <= p90 + 1e-9 for _, p90, a, _ in rows) / n,
            )
        )
    return out


def summarize(rec: Recording, *, snapshots: int = 0) -> Summary:
    """The :class:`Summary` of a recording (``snapshots``: what the collectors took)."""
    ends = [end for by_end in rec.demand.values() for end in by_end]
    horizons = sorted({h for by_h in rec.forecasts.values() for h in by_h})
    lags = [v for _, v in rec.lag]
    return Summary(
        tenants=len(rec.demand),
        windows=rec.windows,
        first_end=min(ends) if ends else None,
        last_end=max(ends) if ends else None,
        forecasts=sum(len(made) for by_h in rec.forecasts.values() for made in by_h.values()),
        horizons=tuple(horizons),
        events=len(rec.events),
        scale_up=rec.actions.get("scale_up", 0),
        scale_down=rec.actions.get("scale_down", 0),
        plans=len(rec.plans),
        duplicates=rec.duplicates,
        lost_snapshots=rec.lost_snapshots,
        late_partials=rec.late_partials,
        snapshots=snapshots,
        lag_peak=max(lags) if lags else None,
        lag_last=lags[-1] if lags else None,
        errors=tuple(forecast_errors(rec)),
        p90_calibrated=calibrated_p90(rec),
        dead_letters=rec.dead_letters,
    )


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def _dead_letter_line(dead: dict[str, int] | None) -> str:
    """How many records the worker sent to the dead-letter topic, by reason.

    >>> _dead_letter_line({"clock_skew": 3, "decode_error": 0, "bad_value": 1})
    'dead letters: 4 records (bad_value 1, clock_skew 3)'
    >>> _dead_letter_line({"clock_skew": 0})
    'dead letters: 0 records'
    """
    if dead is None:
        return "dead letters: not measured (the worker's /metrics never answered)"
    total = sum(dead.values())
    if not total:
        return "dead letters: 0 records"
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(dead.items()) if n)
    return f"dead letters: {total} records ({reasons})"


def format_summary(s: Summary) -> list[str]:
    """Readable lines, one figure each; every line starts with ``summary:``."""
    lines = []
    span = ""
    if s.first_end is not None and s.last_end is not None:
        hours = (s.last_end - s.first_end) / 3600
        span = f" ending {_when(s.first_end)} .. {_when(s.last_end)} UTC ({hours:.1f} h)"
    late = "" if s.late_partials is None else f", {s.late_partials} late partials dropped"
    lines.append(
        f"windows: {s.windows} TenantWindows from {count_of(s.tenants, 'tenant')}{span}; "
        f"{count_of(s.snapshots, 'snapshot')} taken, {s.lost_snapshots} lost{late}"
    )
    lines.append(_dead_letter_line(s.dead_letters))
    if s.horizons:
        horizons = ", ".join(format_duration(h) for h in s.horizons)
        lines.append(f"forecasts: {s.forecasts} recorded (horizons {horizons})")
    else:
        lines.append("forecasts: 0 recorded (the worker published none)")
    lines.append(
        f"events: {s.events} scaling events ({s.scale_up} scale_up, {s.scale_down} scale_down) "
        f"in {count_of(s.plans, 'plan')}; {count_of(s.duplicates, 'duplicate')} dropped"
    )
    if s.lag_peak is None or s.lag_last is None:
        lines.append("consumer lag: not measured")
    else:
        peak = count_of(round(s.lag_peak), "record")
        lines.append(f"consumer lag: peak {peak}, {s.lag_last:.0f} at the end")
    if not s.errors:
        lines.append("forecast error: no forecast could be scored yet")
    p90 = "calibrated p90" if s.p90_calibrated else "p90"
    for e in s.errors:
        ratio = "" if math.isnan(e.ratio) else f" = {e.ratio:.2f} x"
        lines.append(
            f"forecast error {format_duration(e.horizon_s)}: MAE {e.mae:.2f} GPUs over "
            f"{count_of(e.pairs, 'forecast')} vs last value {e.last_value_mae:.2f}{ratio}; "
            f"{p90} covers {100 * e.p90_coverage:.0f} %"
        )
    return [f"summary: {line}" for line in lines]
