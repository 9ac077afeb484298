"""PNG plots of `dprobe evaluate`: forecast vs actual for a few tenants, error by horizon.

matplotlib is imported inside the functions (Agg backend, no display needed).

Example:
    >>> from dprobe.models.forecast.evaluation import EvalResult, MetricRow
    >>> import tempfile, pathlib
    >>> res = EvalResult(rows=[MetricRow("last-value", 600.0, 1.0, 1.0, 1.0, 0.1, 0.05, 10)])
    >>> [p.name for p in error_by_horizon(res, pathlib.Path(tempfile.mkdtemp()))]
    ['error_by_horizon.png']
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from dprobe.models.forecast.evaluation import EvalResult


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(horizon_s: float) -> str:
    """``600 -> '10 min'``, ``3600 -> '1 h'``."""
    if horizon_s >= 3600 and horizon_s % 3600 == 0:
        return f"{horizon_s / 3600:g} h"
    return f"{horizon_s / 60:g} min"


def error_by_horizon(result: EvalResult, out: Path) -> list[Path]:
    """One figure: MASE (vs last value), MAE, p90 coverage and p90 pinball loss per model
    against the horizon; a calibrated model's uncalibrated p90 is drawn dashed beside it."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (ax1, ax2), (ax3, ax4) = axes
    models = sorted({r.model for r in result.rows})
    horizons = sorted({r.horizon_s for r in result.rows})
    pos = {h: i for i, h in enumerate(horizons)}
    for name in models:
        rows = sorted((r for r in result.rows if r.model == name), key=lambda r: r.horizon_s)
        xs = [pos[r.horizon_s] for r in rows]
        (line,) = ax1.plot(xs, [r.mase for r in rows], marker="o", label=name)
        ax2.plot(xs, [r.mae for r in rows], marker="o", label=name)
        ax3.plot(xs, [r.p90_coverage for r in rows], marker="o", color=line.get_color())
        ax4.plot(xs, [r.pinball_p90 for r in rows], marker="o", color=line.get_color())
        if any(r.calibrated for r in rows):
            style = {"ls": "--", "marker": "x", "lw": 0.9, "color": line.get_color()}
            ax3.plot(xs, [r.p90_coverage_uncalibrated for r in rows], **style)
            ax4.plot(xs, [r.pinball_p90_uncalibrated for r in rows], **style)
    labels = [_label(h) for h in horizons]
    ax1.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax1.set(xlabel="horizon", ylabel="MASE vs last value (log scale)", yscale="log")
    ax2.set(xlabel="horizon", ylabel="MAE (GPUs)")
    ax3.axhspan(0.87, 0.93, color="grey", alpha=0.15, lw=0)
    ax3.axhline(0.9, color="grey", lw=0.8, ls="--")
    ax3.set(xlabel="horizon", ylabel="p90 coverage (share of actuals <= p90)")
    log = all(r.pinball_p90 > 0 for r in result.rows)  # False for NaN too
    ax4.set(
        xlabel="horizon",
        ylabel="pinball loss at 0.9 (GPUs" + (", log scale)" if log else ")"),
        yscale="log" if log else "linear",
    )
    for ax in (ax1, ax2, ax3, ax4):
        ax.set_xticks(range(len(horizons)), labels)
    ax1.legend(fontsize=8)
    if any(r.calibrated for r in result.rows):
        ax3.set_title("solid: calibrated p90; dashed: uncalibrated", fontsize=9)
    fig.suptitle("Forecast error by horizon (test span)")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "error_by_horizon.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def forecasts_vs_actual(
    result: EvalResult,
    out: Path,
    *,
    tenants: Sequence[str],
    horizon_s: float,
    models: Sequence[str],
) -> list[Path]:
    """One figure per tenant: actual demand and each model's p50 (and, for the last model,
    the p50-p90 band as it forecast it: calibrated unless evaluate ran without) at
    ``horizon_s``."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for tenant in tenants:
        if not any(result.series.get((name, tenant, horizon_s)) for name in models):
            continue  # nothing of it was forecast at this horizon: no empty plot
        fig, ax = plt.subplots(figsize=(11, 4))
        actual_drawn = False
        for name in models:
            pts = result.series.get((name, tenant, horizon_s))
            if not pts:
                continue
            t = [datetime.fromtimestamp(p[0], UTC) for p in pts]
            if not actual_drawn:
                ax.plot(t, [p[3] for p in pts], color="black", lw=1.2, label="actual")
                actual_drawn = True
            (line,) = ax.plot(t, [p[1] for p in pts], lw=0.9, label=f"{name} p50")
            if name == models[-1]:
                ax.fill_between(
                    t,
                    [p[1] for p in pts],
                    [p[2] for p in pts],
                    alpha=0.2,
                    color=line.get_color(),
                    label=f"{name} p50-p90",
                )
        ax.set(
            title=f"{tenant}: forecast {_label(horizon_s)} ahead vs actual (test span)",
            ylabel="demand (GPUs)",
        )
        ax.legend(fontsize=8, loc="upper left")
        fig.autofmt_xdate()
        fig.tight_layout()
        path = out / f"forecast_{file_word(tenant)}_{int(horizon_s)}s.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def file_word(name: str) -> str:
    """``name`` as part of a file name: kept when it is letters, digits, ``-``, ``_`` and
    ``.`` only; otherwise those others become ``_`` and a short hash of the name is added,
    so two names that differ only there (``team/a``, ``team_a``) get files of their own.

    >>> file_word("vc-a"), file_word("team/a"), file_word("team_a")
    ('vc-a', 'team_a-65f838', 'team_a')
    """
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    if safe == name and name not in (".", ".."):
        return name
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"
