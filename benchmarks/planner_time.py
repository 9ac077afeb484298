"""Planner time for 100 VCs per planning interval (DESIGN §6: forecasting + planning for
100 tenants <= 200 ms per window). Prints the median over several runs.

    .venv/bin/python benchmarks/planner_time.py [--tenants 100] [--plans 200] [--repeats 7]

Each run plans ``--plans`` consecutive intervals (60 s apart) for a cluster of 8-GPU nodes
whose tenants' forecasts drift randomly, applying every plan, so the damping history is
as full as in a running worker; the figure is the median time of one plan.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._counts import at_least
from dprobe.count_text import count_of
from dprobe.models.planner import PlanInput, Planner, TenantState


def one_run(tenants: int, plans: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    state = []
    for i in range(tenants):
        q = rng.randint(1, 32) * 8
        state.append(
            TenantState(
                f"vc-{i:03d}",
                quota_gpus=q,
                guaranteed_gpus=(q // 16) * 8,
                idle_gpus=rng.randint(0, q // 8) * 8,
                p50=q * 0.8,
                p90=q,
            )
        )
    capacity = sum(t.quota_gpus for t in state) + 64
    planner = Planner()
    times = []
    for k in range(plans):
        state = [
            replace(t, p90=max(0.0, t.p90 * rng.uniform(0.8, 1.25)), p50=max(0.0, t.p90 * 0.8))
            for t in state
        ]
        inp = PlanInput(ts=60.0 * k, capacity_gpus=capacity, tenants=tuple(state))
        t0 = time.perf_counter()
        plan = planner.plan(inp)
        times.append(time.perf_counter() - t0)
        tg = plan.targets()
        state = [
            replace(
                t,
                quota_gpus=tg[t.tenant],
                idle_gpus=min(tg[t.tenant], rng.randint(0, tg[t.tenant] // 8) * 8),
            )
            for t in state
        ]
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--plans", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    at_least(ap, a, "--tenants", "--plans", "--repeats")
    medians = [statistics.median(one_run(a.tenants, a.plans, seed)) for seed in range(a.repeats)]
    print(
        f"planner: {a.tenants} VCs, {a.plans} plans x {count_of(a.repeats, 'run')}: median "
        f"{statistics.median(medians) * 1e3:.2f} ms per plan "
        f"(runs' medians {min(medians) * 1e3:.2f}-{max(medians) * 1e3:.2f} ms)"
    )


if __name__ == "__main__":
    main()
