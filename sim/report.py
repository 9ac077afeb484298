"""Rows, table and bar chart of a simulation grid.

``reduction_vs_static`` is the percentage by which a cell's average queueing delay is
below the static cell of the same policy (positive = better; ``None`` without a static
cell or when static had no delay).

Example:
    >>> from dprobe.sim.run import CellResult
    >>> def cell(mode, q):
    ...     return CellResult("fifo", mode, 1, 0, 0, q, q, q, 0.5, 0, 0, 1.0, 0.1, "")
    >>> [r["reduction_vs_static"] for r in rows([cell("static", 100.0), cell("oracle", 25.0)])]
    [0.0, 75.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dprobe.sim.run import CellResult

COLUMNS = (
    "policy",
    "mode",
    "avg_queue_s",
    "p95_queue_s",
    "avg_jct_s",
    "alloc_ratio",
    "node_moves",
    "reduction_vs_static",
)


def rows(results: Sequence[CellResult]) -> list[dict[str, Any]]:
    """One plain row per cell, with exactly :data:`COLUMNS`."""
    static = {r.policy: r.avg_queue_s for r in results if r.mode == "static"}
    out = []
    for r in results:
        base = static.get(r.policy)
        red = None if not base else round(100.0 * (base - r.avg_queue_s) / base, 2)
        out.append(
            {
                "policy": r.policy,
                "mode": r.mode,
                "avg_queue_s": round(r.avg_queue_s, 1),
                "p95_queue_s": round(r.p95_queue_s, 1),
                "avg_jct_s": round(r.avg_jct_s, 1),
                "alloc_ratio": round(r.alloc_ratio, 4),
                "node_moves": r.node_moves,
                "reduction_vs_static": red,
            }
        )
    return out


def table(results: Sequence[CellResult]) -> str:
    """A fixed-width text table (Markdown-compatible) of :func:`rows`."""
    head = [
        "policy",
        "mode",
        "avg queue s",
        "p95 queue s",
        "avg JCT s",
        "alloc ratio",
        "node moves",
        "vs static",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows(results):
        red = "" if r["reduction_vs_static"] is None else f"{r['reduction_vs_static']:+.2f} %"
        if r["mode"] == "static":
            red = "-"
        lines.append(
            f"| {r['policy']} | {r['mode']} | {_s(r['avg_queue_s'])} | {_s(r['p95_queue_s'])} | "
            f"{_s(r['avg_jct_s'])} | {r['alloc_ratio']:.3f} | {r['node_moves']} | {red} |"
        )
    return "\n".join(lines)


def _s(x: float) -> str:
    return f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"


def chart(results: Sequence[CellResult], path: str | Path, title: str = "") -> Path:
    """Grouped bars of average queueing delay (log scale) per policy and mode; PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
                _s(by.get((p, m), 0.0)),
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
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
