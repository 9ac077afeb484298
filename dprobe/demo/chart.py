"""The demo's PNG: demand vs forecast vs quota, one panel per tenant, on event time.

:func:`chart_series` assembles plain series from a :class:`Recording` (tested without
matplotlib); :func:`render` draws them. The forecast is drawn at the time it is *for*
(made at window end ``T`` for horizon ``h`` -> plotted at ``T + h``), with its p50 line
and a p50-p90 band (the worker's p90: calibrated online by default, and then labelled so),
so it can be read against the demand it predicted. The quota is a
step line from the scaling events (each says the quota before and after it); a tenant no
event moved keeps the quota the worker reports.

Example:
    >>> rec = Recording(demand={"vc-a": {600.0: 4.0, 1200.0: 6.0}},
    ...                 forecasts={"vc-a": {600.0: {600.0: (5.0, 7.0)}}},
    ...                 scraped_quota={"vc-a": 8.0})
    >>> [(s.forecast, s.quota) for s in chart_series(rec, 600.0)]
    [([(1200.0, 5.0, 7.0)], [(600.0, 8.0), (1200.0, 8.0)])]
    >>> render(chart_series(rec, 600.0), Path("demo.png"), horizon_s=600.0)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dprobe.demo.record import Recording
from dprobe.demo.summary import calibrated_p90
from dprobe.event_line import format_duration


@dataclass(frozen=True)
class TenantSeries:
    """What one panel shows, sorted by time (epoch seconds)."""

    tenant: str
    demand: list[tuple[float, float]]  # (window end, GPUs)
    forecast: list[tuple[float, float, float]]  # (target time, p50, p90)
    quota: list[tuple[float, float]]  # (time set, GPUs)
    events: list[tuple[float, float]]  # (window end, target quota) of scaling events
    calibrated: bool = False  # the p90 was calibrated online (scaling events say so)


def chart_horizon(rec: Recording) -> float | None:
    """The horizon to draw: the shortest one with forecasts (most of them can be checked)."""
    horizons = sorted({h for by_h in rec.forecasts.values() for h, made in by_h.items() if made})
    return horizons[0] if horizons else None


def demand_steps(rec: Recording, tenant: str) -> list[tuple[float, float]]:
    """The tenant's demand at every window end of the run from its first window on: 0
    where it sent no window (a tenant that runs nothing sends none), so a quiet spell is
    not drawn as its last window's demand held across it."""
    own = rec.demand.get(tenant, {})
    if not own:
        return []
    first = min(own)
    ends = sorted({end for by_end in rec.demand.values() for end in by_end if end >= first})
    return [(end, own.get(end, 0.0)) for end in ends]


def quota_steps(rec: Recording, tenant: str) -> list[tuple[float, float]]:
    """The tenant's quota over time: ``(time, GPUs)`` steps over the span of its demand."""
    ends = [end for end, _ in demand_steps(rec, tenant)]
    moves = sorted(  # by time; events of one time keep their order of arrival
        (
            (
                float(ev.window_end or ev.ts),
                float(ev.current_quota_gpus),
                float(ev.target_quota_gpus),
            )
            for ev in rec.events
            if ev.tenant == tenant
        ),
        key=lambda move: move[0],
    )
    if moves:
        first = min(ends[0], moves[0][0]) if ends else moves[0][0]
        steps = [(first, moves[0][1])] + [(t, target) for t, _, target in moves]
    elif tenant in rec.scraped_quota and ends:
        steps = [(ends[0], rec.scraped_quota[tenant])]
    else:
        return []
    last = ends[-1] if ends else steps[-1][0]
    if last > steps[-1][0]:
        steps.append((last, steps[-1][1]))
    return steps


def chart_series(rec: Recording, horizon_s: float | None) -> list[TenantSeries]:
    """One :class:`TenantSeries` per tenant, tenants sorted by name."""
    calibrated = bool(calibrated_p90(rec))
    out = []
    for tenant in rec.tenants:
        made = rec.forecasts.get(tenant, {}).get(horizon_s, {}) if horizon_s else {}
        events = sorted(
            (float(ev.window_end or ev.ts), float(ev.target_quota_gpus))
            for ev in rec.events
            if ev.tenant == tenant
        )
        out.append(
            TenantSeries(
                tenant=tenant,
                demand=demand_steps(rec, tenant),
                forecast=sorted(
                    (at + (horizon_s or 0.0), p50, p90) for at, (p50, p90) in made.items()
                ),
                quota=quota_steps(rec, tenant),
                events=events,
                calibrated=calibrated,
            )
        )
    return out


def render(series: list[TenantSeries], path: Path, *, horizon_s: float | None,
           title: str = "dprobe demo") -> Path:  # fmt: skip
    """Draw ``series`` into the PNG ``path`` (folders created); returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    from datetime import UTC, datetime

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    def when(ts: float) -> datetime:
        return datetime.fromtimestamp(ts, UTC)

    panels = max(1, len(series))
    fig, axes = plt.subplots(panels, 1, figsize=(11, 2.4 * panels + 0.8), sharex=True,
                             squeeze=False)  # fmt: skip
    label = f"forecast {format_duration(horizon_s)} ahead" if horizon_s else "forecast"
    band = "p50-p90 (calibrated)" if any(s.calibrated for s in series) else "p50-p90"
    for ax, s in zip(axes[:, 0], series, strict=False):
        if s.demand:
            ax.step([when(t) for t, _ in s.demand], [v for _, v in s.demand], where="post",
                    color="black", lw=1.4, label="demand (running + pending GPUs)")  # fmt: skip
        if s.forecast:
            xs = [when(t) for t, _, _ in s.forecast]
            ax.plot(xs, [p50 for _, p50, _ in s.forecast], color="tab:blue", lw=1.2,
                    label=f"{label}: p50")  # fmt: skip
            ax.fill_between(xs, [p50 for _, p50, _ in s.forecast],
                            [p90 for _, _, p90 in s.forecast], color="tab:blue", alpha=0.2,
                            lw=0, label=band)  # fmt: skip
        if s.quota:
            ax.step([when(t) for t, _ in s.quota], [v for _, v in s.quota], where="post",
                    color="tab:orange", lw=1.6, label="quota")  # fmt: skip
        if s.events:
            ax.scatter([when(t) for t, _ in s.events], [v for _, v in s.events], marker="o",
                       s=18, color="tab:red", zorder=3, label="scaling event")  # fmt: skip
        ax.set_ylabel(f"{s.tenant}\nGPUs")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles, labels = [], []
    for ax in axes[:, 0]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    axes[-1, 0].xaxis.set_major_formatter(mdates.DateFormatter("%a %H:%M", tz=UTC))
    axes[-1, 0].set_xlabel("event time (UTC)")
    # title on the first line, legend on the second, panels below both
    top = 1.0 - 0.6 / fig.get_figheight()
    fig.suptitle(title, x=0.01, y=0.995, ha="left", va="top", fontsize=11)
    if handles:
        anchor = (0.01, 1.0 - 0.3 / fig.get_figheight())
        fig.legend(handles, labels, loc="upper left", bbox_to_anchor=anchor,
                   ncol=min(5, len(handles)), fontsize=8, frameon=False)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, top))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
