"""Figures of the same grid run on several seeds: each cell against reactive, per seed.

One seed cannot rank quota modes on a heavy-tailed job stream (a few long jobs on a lent
node decide a run), so ``dprobe simulate --seeds`` runs the grid once per seed and
summarises each (latency, reclaim, policy, mode) cell over them: its mean average
queueing delay, and its average queueing delay as a share of reactive's *in the same
seed* (mean, geometric mean, and in how many seeds it waited less than reactive).

Example: predictive waits 80 and 150 s where reactive waits 100 s both times:

    >>> s = shares([(80.0, 100.0), (150.0, 100.0)])
    >>> s.runs, s.mean, round(s.geo, 3), s.below, s.low, s.high
    (2, 1.15, 1.095, 1, 0.8, 1.5)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from dprobe.sim.report import seconds_text as _s
from dprobe.sim.run import CellResult


@dataclass(frozen=True)
class Shares:
    """Ratios value / base over runs whose base is above 0: how many, their mean and
    geometric mean (``nan`` when there are none, or the geometric mean when a value is
    0), how many were below 1, and the lowest and highest (``nan`` when none)."""

    runs: int
    mean: float
    geo: float
    below: int
    low: float = math.nan
    high: float = math.nan


def shares(pairs: Iterable[tuple[float, float]]) -> Shares:
    """:class:`Shares` of ``(value, base)`` pairs; pairs whose base is 0 are left out (no
    share is defined)."""
    ratios = [value / base for value, base in pairs if base > 0]
    if not ratios:
        return Shares(0, math.nan, math.nan, 0)
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if min(ratios) > 0 else math.nan
    below = sum(1 for x in ratios if x < 1)
    return Shares(len(ratios), sum(ratios) / len(ratios), geo, below, min(ratios), max(ratios))


Cell = tuple[float, str, str, str]  # latency, reclaim, policy, mode


def _cells(results: Sequence[CellResult]) -> dict[Cell, list[CellResult]]:
    out: dict[Cell, list[CellResult]] = {}
    for r in results:
        out.setdefault((r.move_latency_s, r.reclaim, r.policy, r.mode), []).append(r)
    return out


def summary(results: Sequence[CellResult]) -> list[dict[str, Any]]:
    """One row per (latency, reclaim, policy, mode) over the seeds of ``results``:
    ``seeds``, the means of ``avg_queue_s`` and ``lost_gpu_h``, and ``vs_reactive``, the
    :class:`Shares` of its average queueing delay against reactive's in the same seed
    (``None`` for reactive itself or without reactive cells)."""
    cells = _cells(results)
    reactive = {
        (r.seed, r.move_latency_s, r.reclaim, r.policy): r.avg_queue_s
        for r in results
        if r.mode == "reactive"
    }
    out = []
    for (lat, rec, pol, mode), runs in cells.items():
        base = [reactive.get((r.seed, lat, rec, pol)) for r in runs]
        vs = None
        if mode != "reactive" and all(b is not None for b in base):
            vs = shares((r.avg_queue_s, float(b or 0.0)) for r, b in zip(runs, base, strict=True))
        out.append(
            {
                "move_latency_s": lat,
                "reclaim": rec,
                "policy": pol,
                "mode": mode,
                "seeds": len(runs),
                "avg_queue_s": sum(r.avg_queue_s for r in runs) / len(runs),
                "lost_gpu_h": sum(r.lost_gpu_h for r in runs) / len(runs),
                "vs_reactive": vs,
            }
        )
    return out


def mean_cells(results: Sequence[CellResult]) -> list[CellResult]:
    """One :class:`CellResult` per cell whose numeric figures are the means over its
    seeds (for charts), in first-seen order; ``seed`` is -1 when several were averaged."""
    out = []
    for runs in _cells(results).values():
        if len(runs) == 1:
            out.append(runs[0])
            continue
        means: dict[str, Any] = {}
        for f in fields(CellResult):
            values = [getattr(r, f.name) for r in runs]
            if not isinstance(values[0], int | float):
                continue
            mean = sum(values) / len(values)
            means[f.name] = round(mean) if isinstance(values[0], int) else mean
        means["seed"] = -1
        out.append(replace(runs[0], **means))
    return out


def table(results: Sequence[CellResult]) -> str:
    """One line per move latency x reclaim rule x policy (Markdown-compatible): each
    mode's mean average queueing delay over the seeds, predictive's and the oracle's
    share of reactive's wait in the same seed (mean, geometric mean in brackets, lowest
    to highest, seeds below reactive), and the mean GPU-hours reactive and predictive
    lost to preemption."""
    rows = {
        (r["move_latency_s"], r["reclaim"], r["policy"], r["mode"]): r for r in summary(results)
    }
    keys = list(dict.fromkeys(k[:3] for k in rows))
    modes = ("static", "reactive", "predictive", "oracle")
    head = ["latency s", "reclaim", "policy", "seeds", *modes]
    head += ["predictive / reactive", "oracle / reactive"]
    head += ["lost GPU-h reactive", "lost GPU-h predictive"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for key in keys:
        cells = [rows.get((*key, m)) for m in modes]
        n = max(c["seeds"] for c in cells if c is not None)
        lat, rec, pol = key
        waits = ["-" if c is None else _s(c["avg_queue_s"]) for c in cells]
        vs = [_share(None if c is None else c["vs_reactive"]) for c in cells[2:]]
        lost = ["-" if c is None else _s(c["lost_gpu_h"]) for c in cells[1:3]]
        lines.append(
            f"| {lat:g} | {rec} | {pol} | {n} | " + " | ".join([*waits, *vs, *lost]) + " |"
        )
    return "\n".join(lines)


def _share(s: Shares | None) -> str:
    if s is None or not s.runs:
        return "-"
    geo = "-" if math.isnan(s.geo) else f"{s.geo:.3f}"
    spread = f", {s.low:.2f}-{s.high:.2f}" if s.runs > 1 else ""
    return f"{s.mean:.3f} ({geo}){spread}, {s.below}/{s.runs} below"
