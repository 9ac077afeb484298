"""Run a grid of (policy, mode) cells, in parallel processes when asked, with a progress
bar on stderr.

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
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from tqdm import tqdm

from dprobe.sim.run import CellResult, run_cell
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
    s = settings or SimSettings()
    cells = sorted(((p, m) for p in policies for m in modes), key=lambda c: _COST.get(c[1], 9))
    bar = tqdm(total=len(cells), desc="simulate", unit="run", file=sys.stderr, disable=not progress)
    done: dict[tuple[str, str], CellResult] = {}
    try:
        if workers <= 1:
            for p, m in cells:
                bar.set_postfix_str(f"{p}/{m}")
                done[(p, m)] = run_cell(records, vc_nodes, p, m, settings=s, sharing=sharing)
                bar.update()
        else:
            ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                futs = {
                    pool.submit(
                        run_cell, list(records), vc_nodes, p, m, settings=s, sharing=sharing
                    ): (p, m)
                    for p, m in cells
                }
                for fut in as_completed(futs):
                    done[futs[fut]] = fut.result()
                    bar.set_postfix_str("/".join(futs[fut]))
                    bar.update()
    finally:
        bar.close()
    return [done[(p, m)] for p in policies for m in modes]
