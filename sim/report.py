"""Rows, table and bar chart of a simulation grid.

``unfinished``: jobs that never finished: the run ended with no room for them in their
VC in that mode (e.g. a job larger than a static VC). Queueing delay is averaged over the
jobs that started and JCT over those that finished, so a cell with unfinished jobs is
not comparable with one without; the oracle's hindsight pick prefers fewer of them.
``reduction_vs_static`` is the percentage by which a cell's average queueing delay is
below the static cell of the same seed, policy, move latency and reclaim rule (positive =
better; ``None`` without a static cell or when static had no delay);
``reduction_vs_reactive`` the same against the reactive cell. ``oracle_gain_captured``
(predictive cells only) is ``(reactive - predictive) / (reactive - oracle)``: the share of
the oracle's gain over reactive that predictive captures (``None`` when the oracle gains
nothing). ``oracle_pick`` (oracle cells only) names the run the oracle kept: ``planner``,
``foresight`` or ``reactive``. ``repeated``: true for a static row that shows again the
run of an earlier static row of the same seed and policy (static quotas never move a node,
so a sweep runs static once per seed and policy and shows it under every move latency x
reclaim rule, with that cell's ``move_latency_s`` and ``reclaim``); leave these rows out
to count each run once.

Example:
    >>> from dprobe.sim.run import CellResult
    >>> def cell(mode, q):
    ...     return CellResult("fifo", mode, 0.0, "wait", 1, 0, 0, q, q, q, 0.5, 0, 0,
    ...                       0.0, 0.0, 0.0, 0, 1.0, 0.1, "")
    >>> out = rows([cell("static", 100.0), cell("reactive", 40.0), cell("predictive", 30.0),
    ...             cell("oracle", 20.0)])
    >>> [(r["reduction_vs_static"], r["oracle_gain_captured"]) for r in out]
    [(0.0, None), (60.0, None), (70.0, 0.5), (80.0, None)]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dprobe.sim.run import CellResult

COLUMNS = (
    "policy",
    "mode",
    "move_latency_s",
    "reclaim",
    "seed",
    "jobs",
    "unfinished",
    "avg_queue_s",
    "p95_queue_s",
    "avg_jct_s",
    "alloc_ratio",
    "node_moves",
    "preemptions",
    "policy_preemptions",
    "lost_gpu_h",
    "moves_in_flight_gpu_h",
    "guarantee_wait_s",
    "reduction_vs_static",
    "reduction_vs_reactive",
    "oracle_gain_captured",
    "oracle_pick",
    "repeated",
)


def _pct(base: float | None, value: float) -> float | None:
    # + 0.0: a change that rounds to nothing is 0.0, never -0.0
    return None if not base else round(100.0 * (base - value) / base, 2) + 0.0


def rows(results: Sequence[CellResult]) -> list[dict[str, Any]]:
    """One plain row per cell, with exactly :data:`COLUMNS`."""
    by = {(r.seed, r.policy, r.move_latency_s, r.reclaim, r.mode): r.avg_queue_s for r in results}
    out = []
    static_shown: set[tuple[int, str]] = set()
    for r in results:
        key = (r.seed, r.policy, r.move_latency_s, r.reclaim)
        repeated = r.mode == "static" and (r.seed, r.policy) in static_shown
        if r.mode == "static":
            static_shown.add((r.seed, r.policy))
        reactive, oracle = by.get((*key, "reactive")), by.get((*key, "oracle"))
        captured = None
        if r.mode == "predictive" and reactive is not None and oracle is not None:
            gain = reactive - oracle
            captured = round((reactive - r.avg_queue_s) / gain, 3) if gain > 1e-9 else None
        out.append(
            {
                "policy": r.policy,
                "mode": r.mode,
                "move_latency_s": r.move_latency_s,
                "reclaim": r.reclaim,
                "seed": r.seed,
                "jobs": r.jobs,
                "unfinished": r.unfinished,
                "avg_queue_s": round(r.avg_queue_s, 1),
                "p95_queue_s": round(r.p95_queue_s, 1),
                "avg_jct_s": round(r.avg_jct_s, 1),
                "alloc_ratio": round(r.alloc_ratio, 4),
                "node_moves": r.node_moves,
                "preemptions": r.preemptions,
                "policy_preemptions": r.policy_preemptions,
                "lost_gpu_h": round(r.lost_gpu_h, 2),
                "moves_in_flight_gpu_h": round(r.moves_in_flight_gpu_h, 2),
                "guarantee_wait_s": round(r.guarantee_wait_s, 1),
                "reduction_vs_static": _pct(by.get((*key, "static")), r.avg_queue_s),
                "reduction_vs_reactive": _pct(reactive, r.avg_queue_s),
                "oracle_gain_captured": captured,
                "oracle_pick": r.oracle_pick or None,
                "repeated": repeated,
            }
        )
    return out


def table(results: Sequence[CellResult]) -> str:
    """A fixed-width text table (Markdown-compatible) of :func:`rows`."""
    head = [
        "policy",
        "mode",
        "latency s",
        "reclaim",
        "unfinished",
        "avg queue s",
        "p95 queue s",
        "avg JCT s",
        "alloc ratio",
        "node moves",
        "preemptions",
        "lost GPU-h",
        "in-flight GPU-h",
        "guarantee wait s",
        "wait vs static",
        "wait vs reactive",
        "oracle gain captured",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows(results):
        # the change of the wait, as the sweep's table shows it: negative = waits less
        vs_static = "-" if r["mode"] == "static" else _signed(_neg(r["reduction_vs_static"]))
        vs_reactive = "-" if r["mode"] == "reactive" else _signed(_neg(r["reduction_vs_reactive"]))
        cap = r["oracle_gain_captured"]
        # static quotas never move a node: neither move latency nor reclaim rule applies
        static = r["mode"] == "static"
        latency = "-" if static else f"{r['move_latency_s']:g}"
        reclaim = "-" if static else r["reclaim"]
        lines.append(
            f"| {r['policy']} | {r['mode']} | {latency} | {reclaim} | "
            f"{r['unfinished']} | {seconds_text(r['avg_queue_s'])} | "
            f"{seconds_text(r['p95_queue_s'])} | {seconds_text(r['avg_jct_s'])} | "
            f"{r['alloc_ratio']:.3f} | {r['node_moves']:,} | {r['preemptions']:,} | "
            f"{seconds_text(r['lost_gpu_h'])} | {seconds_text(r['moves_in_flight_gpu_h'])} | "
            f"{seconds_text(r['guarantee_wait_s'])} | {vs_static} | {vs_reactive} | "
            f"{'-' if cap is None else f'{cap:.2f}'} |"
        )
    return "\n".join(lines)


def sweep_table(results: Sequence[CellResult]) -> str:
    """One line per move latency x reclaim rule x policy: each mode's average queueing
    delay, predictive against reactive, the share of the oracle's gain it captures, and
    the GPU-hours reactive and predictive lost to preemption (Markdown-compatible)."""
    by = {(r.move_latency_s, r.reclaim, r.policy, r.mode): r for r in results}
    keys = list(dict.fromkeys((r.move_latency_s, r.reclaim, r.policy) for r in results))
    modes = ("static", "reactive", "predictive", "oracle")
    head = ["latency s", "reclaim", "policy", *modes, "pred wait vs reactive", "captured"]
    head += ["lost GPU-h reactive", "lost GPU-h predictive"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    rowmap = {(r["move_latency_s"], r["reclaim"], r["policy"], r["mode"]): r for r in rows(results)}
    for lat, rec, pol in keys:
        cells = [by.get((lat, rec, pol, m)) for m in modes]
        pred = rowmap.get((lat, rec, pol, "predictive"))
        vs = _signed(None if pred is None else _neg(pred["reduction_vs_reactive"]))
        cap = None if pred is None else pred["oracle_gain_captured"]
        lost = [by.get((lat, rec, pol, m)) for m in ("reactive", "predictive")]
        lines.append(
            f"| {lat:g} | {rec} | {pol} | "
            + " | ".join("-" if c is None else seconds_text(c.avg_queue_s) for c in cells)
            + f" | {vs} | {'-' if cap is None else f'{cap:.2f}'} | "
            + " | ".join("-" if c is None else seconds_text(c.lost_gpu_h) for c in lost)
            + " |"
        )
    return "\n".join(lines)


def _neg(pct: float | None) -> float | None:
    # 0.0 - pct, not -pct: no change reads +0.00 %, not -0.00 % (waits less)
    return None if pct is None else 0.0 - pct


def _signed(pct: float | None) -> str:
    """A change in percent with its sign; ``-`` without one (no reference, or a reference
    that did not wait), as every other empty cell of the tables."""
    return "-" if pct is None else f"{pct:+.2f} %"


def seconds_text(x: float) -> str:
    """Seconds (or any figure) for a table: one decimal below 100, none above."""
    return f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"


def chart(results: Sequence[CellResult], path: str | Path, title: str = "") -> Path:
    """Grouped bars of average queueing delay (log scale) per policy and mode; PNG."""
    plt = _pyplot()
    policies = list(dict.fromkeys(r.policy for r in results))
    modes = list(dict.fromkeys(r.mode for r in results))
    by = {(r.policy, r.mode): r.avg_queue_s for r in results}
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(policies)), 4.0), dpi=120)
    width = 0.8 / max(1, len(modes))
    for i, m in enumerate(modes):
        xs = [k + (i - (len(modes) - 1) / 2) * width for k in range(len(policies))]
        ys = [max(by.get((p, m), 0.0), 0.1) for p in policies]
        ax.bar(xs, ys, width, label=m)
        for x, p in zip(xs, policies, strict=True):
            ax.text(
                x,
                max(by.get((p, m), 0.0), 0.1),
                seconds_text(by.get((p, m), 0.0)),
                ha="center",
                va="bottom",
                fontsize=6,
                rotation=90,
            )
    ax.set_yscale("log")
    ax.set_xticks(range(len(policies)), [p.upper() for p in policies])
    ax.set_ylabel("average queueing delay (s, log; 0 drawn at 0.1)")
    ax.set_title(title or "Average queueing delay by policy and quota mode")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def sweep_chart(results: Sequence[CellResult], path: str | Path, title: str = "") -> Path:
    """Average queueing delay against move latency: a panel per reclaim rule (rows) and
    policy (columns), a line per quota mode; PNG."""
    plt = _pyplot()
    policies = list(dict.fromkeys(r.policy for r in results))
    reclaims = list(dict.fromkeys(r.reclaim for r in results))
    modes = list(dict.fromkeys(r.mode for r in results))
    fig, axes = plt.subplots(
        len(reclaims),
        len(policies),
        figsize=(2.6 * len(policies) + 1, 2.4 * len(reclaims) + 0.8),
        dpi=120,
        squeeze=False,
        sharex=True,
    )
    for i, rec in enumerate(reclaims):
        for k, pol in enumerate(policies):
            ax = axes[i][k]
            for m in modes:
                pts = sorted(
                    (r.move_latency_s, max(r.avg_queue_s, 0.1))
                    for r in results
                    if r.policy == pol and r.reclaim == rec and r.mode == m
                )
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", ms=3, label=m)
            ax.set_yscale("log")
            ax.set_title(f"{pol.upper()}, reclaim {rec}", fontsize=8)
            ax.tick_params(labelsize=7)
            if i == len(reclaims) - 1:
                ax.set_xlabel("move latency (s)", fontsize=7)
            if k == 0:
                ax.set_ylabel("avg queueing delay\n(s, log; 0 drawn at 0.1)", fontsize=7)
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(title or "Average queueing delay against move latency", fontsize=9)
    return _save(plt, fig, path)


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (imported only to draw)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: str | Path) -> Path:
    """Lay out ``fig``, write it at ``path`` (folders made) in the format its extension
    names, a PNG without one (written to ``path`` as named: matplotlib would add
    ``.png``), close it."""
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format=out.suffix[1:].lower() or "png")
    plt.close(fig)
    return out
