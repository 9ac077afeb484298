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
from collections.abc import Callable, Mapping, Sequence
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
    return _run_streams(
        [(records, variants)],
        vc_nodes,
        policies=policies,
        modes=modes,
        sharing=sharing,
        workers=workers,
        progress=progress,
        label=label,
    )


def run_seeds(
    streams: Mapping[int, Sequence[JobRecord]],
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
    """:func:`run_sweep` of every ``{seed: records}`` stream, with ``variants`` run under
    that seed, in one pool of ``workers`` processes (no worker idles at the end of one
    seed while another seed has cells left); results seed by seed, each in
    :func:`run_sweep`'s order.

    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> streams = {3: [JobRecord("0", "a", 8, 0.0, 600.0, "", 2)], 4: []}
    >>> rs = run_seeds(streams, {"a": 1}, ["fifo"], ["static"], [SimSettings()], progress=False)
    >>> [(r.seed, r.jobs) for r in rs]
    [(3, 1), (4, 0)]
    """
    return _run_streams(
        [(records, [replace(v, seed=seed) for v in variants]) for seed, records in streams.items()],
        vc_nodes,
        policies=policies,
        modes=modes,
        sharing=sharing,
        workers=workers,
        progress=progress,
        label=label,
    )


Stream = tuple[Sequence[JobRecord], Sequence[SimSettings]]


def _run_streams(
    streams: Sequence[Stream],
    vc_nodes: dict[str, int],
    *,
    policies: Sequence[str],
    modes: Sequence[str],
    sharing: Sharing | None,
    workers: int,
    progress: bool,
    label: str,
) -> list[CellResult]:
    """Every stream x variant x policy x mode cell (see :func:`run_sweep`), in that order."""
    tasks: dict[tuple[int, int, str, str], SimSettings] = {}
    for k, (_, variants) in enumerate(streams):
        for v, s in enumerate(variants):
            for p in policies:
                for m in modes:
                    tasks[(k, v, p, m)] = s
    runs = sorted(
        {(k, 0 if m == "static" else v, p, m) for k, v, p, m in tasks},
        key=lambda c: (_COST.get(c[3], 9), c),
    )
    hindsight = "reactive" in modes  # oracle cells then take reactive's run from the grid

    def call(k: int, v: int, p: str, m: str) -> tuple[Callable[..., CellResult], tuple, dict]:
        records, variants = streams[k]
        fn = run_one if hindsight and m == "oracle" else run_cell
        return fn, (list(records), vc_nodes, p, m), {"settings": variants[v], "sharing": sharing}

    bar = tqdm(total=len(runs), desc=label, unit="run", file=sys.stderr, disable=not progress)
    done: dict[tuple[int, int, str, str], CellResult] = {}
    try:
        if workers <= 1:
            for cell in runs:
                bar.set_postfix_str("/".join(cell[2:]))
                fn, args, kwargs = call(*cell)
                done[cell] = fn(*args, **kwargs)
                bar.update()
        else:
            ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                futs = {}
                for cell in runs:
                    fn, args, kwargs = call(*cell)
                    futs[pool.submit(fn, *args, **kwargs)] = cell
                for fut in as_completed(futs):
                    done[futs[fut]] = fut.result()
                    bar.set_postfix_str("/".join(futs[fut][2:]))
                    bar.update()
    finally:
        bar.close()
    if hindsight:
        for k, v, p, m in runs:
            if m == "oracle":
                done[(k, v, p, m)] = oracle_of(done[(k, v, p, m)], done[(k, v, p, "reactive")])
    out = []
    for k, v, p, m in tasks:
        if m == "static":
            s = streams[k][1][v]
            static = done[(k, 0, p, m)]
            out.append(replace(static, move_latency_s=s.move_latency_s, reclaim=s.reclaim))
        else:
            out.append(done[(k, v, p, m)])
    return out
