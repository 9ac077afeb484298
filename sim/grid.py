"""Run a grid of (policy, mode) cells, or a sweep of such grids over move latency and
reclaim rule, in parallel processes when asked, with a progress bar on stderr.

Example:
    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> recs = [JobRecord("0", "a", 8, 0.0, 600.0, "", 2)]
    >>> rs = run_grid(recs, {"a": 1}, ["fifo", "sjf"], ["static"], progress=False)
    >>> [(r.policy, r.mode, r.avg_queue_s) for r in rs]
    [('fifo', 'static', 0.0), ('sjf', 'static', 0.0)]
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace

from tqdm import tqdm

from dprobe.sim.run import CellResult, oracle_of, run_cell, run_one
from dprobe.sim.settings import SimSettings
from dprobe.sim.sharing import Sharing
from dprobe.traces.jobs_csv import JobRecord

# slow cells (learned forecasters) first, so parallel workers finish together
_COST = {"predictive": 0, "oracle": 1, "reactive": 2, "static": 3}


def run_grid(
    records: Sequence[JobRecord],
    vc_nodes: dict[str, int],
    policies: Sequence[str],
    modes: Sequence[str],
    *,
    settings: SimSettings | None = None,
    sharing: Sharing | None = None,
    workers: int = 1,
    progress: bool = True,
) -> list[CellResult]:
    """Every policy x mode cell; results in (policy, mode) input order."""
    return run_sweep(
        records,
        vc_nodes,
        policies,
        modes,
        [settings or SimSettings()],
        sharing=sharing,
        workers=workers,
        progress=progress,
    )


def sweep_settings(
    base: SimSettings, latencies: Sequence[float], reclaims: Sequence[str]
) -> list[SimSettings]:
    """``base`` at every move latency x reclaim rule, latency-major.

    >>> [(s.move_latency_s, s.reclaim) for s in sweep_settings(SimSettings(), [0, 900],
    ...                                                         ["wait", "preempt"])]
    [(0.0, 'wait'), (0.0, 'preempt'), (900.0, 'wait'), (900.0, 'preempt')]
    """
    return [
        replace(base, move_latency_s=float(lat), reclaim=rec)
        for lat in latencies
        for rec in reclaims
    ]


def run_sweep(
    records: Sequence[JobRecord],
    vc_nodes: dict[str, int],
    policies: Sequence[str],
    modes: Sequence[str],
    variants: Sequence[SimSettings],
    *,
    sharing: Sharing | None = None,
    workers: int = 1,
    progress: bool = True,
    label: str = "simulate",
) -> list[CellResult]:
    """Every variant x policy x mode cell; results in that input order (``label`` names
    the progress bar). Static quotas never move a node, so a static cell is run once per
    policy and its figures reported under every variant; an oracle cell reuses the
    reactive cell of the grid for its hindsight choice instead of running reactive
    again."""
    tasks: dict[tuple[int, str, str], SimSettings] = {}
    for v, s in enumerate(variants):
        for p in policies:
            for m in modes:
                tasks[(v, p, m)] = s
    runs = sorted(
        {(0 if m == "static" else v, p, m) for v, p, m in tasks},
        key=lambda c: (_COST.get(c[2], 9), c),
    )
    hindsight = "reactive" in modes  # oracle cells then take reactive's run from the grid

    def job(mode: str) -> Callable[..., CellResult]:
        return run_one if hindsight and mode == "oracle" else run_cell

    bar = tqdm(total=len(runs), desc=label, unit="run", file=sys.stderr, disable=not progress)
    done: dict[tuple[int, str, str], CellResult] = {}
    try:
        if workers <= 1:
            for v, p, m in runs:
                bar.set_postfix_str(f"{p}/{m}")
                done[(v, p, m)] = job(m)(
                    records, vc_nodes, p, m, settings=variants[v], sharing=sharing
                )
                bar.update()
        else:
            ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                futs = {
                    pool.submit(
                        job(m),
                        list(records),
                        vc_nodes,
                        p,
                        m,
                        settings=variants[v],
                        sharing=sharing,
                    ): (v, p, m)
                    for v, p, m in runs
                }
                for fut in as_completed(futs):
                    done[futs[fut]] = fut.result()
                    bar.set_postfix_str("/".join(futs[fut][1:]))
                    bar.update()
    finally:
        bar.close()
    if hindsight:
        for v, p, m in runs:
            if m == "oracle":
                done[(v, p, m)] = oracle_of(done[(v, p, m)], done[(v, p, "reactive")])
    out = []
    for v, p, m in tasks:
        if m == "static":
            s = variants[v]
            out.append(replace(done[(0, p, m)], move_latency_s=s.move_latency_s, reclaim=s.reclaim))
        else:
            out.append(done[(v, p, m)])
    return out
