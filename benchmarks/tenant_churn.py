"""Planning state under tenant churn: tenants come, run for a while and leave for good.

    .venv/bin/python benchmarks/tenant_churn.py [--generations 5] [--tenants 30]
        [--life-h 8] [--forget-h 2] [--model dprobe-mmoe]

Generation ``g`` of ``--tenants`` tenants sends a 60-s window each minute for
``--life-h`` hours, then never again, and generation ``g + 1`` starts. The plan loop runs
the worker's default forecaster (calibrated, as the worker runs it) and plans every
window end. After each generation the script prints the size of the loop's checkpoint
(what the worker writes into Kafka) and the tenants the forecaster holds, once with
tenants forgotten after ``--forget-h`` hours of silence and once never forgotten (``0``),
from the same windows. With forgetting, the state follows the tenants of the last
``--forget-h`` hours; without it, every tenant ever seen.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks._counts import at_least
from dprobe.models.checkpoint import state_bytes
from dprobe.models.forecast.registry import FORECASTERS, make_forecaster
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.schema import LevelCounts, TenantWindow

STEP_S = 60.0


def window(tenant: str, end: float, gpus: float) -> TenantWindow:
    return TenantWindow(
        tenant=tenant,
        window_start=end - STEP_S,
        window_end=end,
        hosts=1,
        gpus_busy=gpus,
        instances=1,
        util_sum=0.0,
        level_counts=LevelCounts(),
        effective_demand_gpus=gpus,
        pending_gpus=0.0,
        running_gpus=gpus,
    )


def run(args: argparse.Namespace, forget_h: float) -> list[tuple[int, int, float, float]]:
    """Per generation: (tenants seen, tenants held, checkpoint MB, seconds)."""
    rng = random.Random(0)
    model = make_forecaster(args.model, calibrate=True)
    loop = PlanLoop(
        model,
        PlanLoopSettings(capacity_gpus=1024, horizon_s=3600.0, forget_after_s=forget_h * 3600),
    )
    out = []
    end = 0.0
    started = time.perf_counter()
    for g in range(args.generations):
        tenants = [f"g{g}-t{i}" for i in range(args.tenants)]
        for _ in range(round(args.life_h * 3600 / STEP_S)):
            end += STEP_S
            loop.plan_end(end, [window(t, end, float(rng.randint(0, 16))) for t in tenants])
        held = len(model.tenants())
        size = len(state_bytes(loop.state_dict())) / 1e6
        out.append(((g + 1) * args.tenants, held, size, time.perf_counter() - started))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--generations", type=int, default=5)
    p.add_argument("--tenants", type=int, default=30, help="tenants per generation (30)")
    p.add_argument("--life-h", type=float, default=8.0, help="hours each generation sends (8)")
    p.add_argument("--forget-h", type=float, default=2.0, help="forget after (2 h)")
    p.add_argument("--model", default="dprobe-mmoe")
    args = p.parse_args()
    at_least(p, args, "--generations", "--tenants")
    if not STEP_S / 3600 <= args.life_h < math.inf:
        why = "must be > 0 hours (at least one 60-s window)"
        p.exit(2, f"{p.prog}: --life-h {why}, got {args.life_h:g}\n")
    if not 0 <= args.forget_h < math.inf:
        p.exit(2, f"{p.prog}: --forget-h must be >= 0 hours (0: never), got {args.forget_h:g}\n")
    if args.model not in FORECASTERS:
        p.exit(2, f"{p.prog}: --model {args.model!r}: choose from {', '.join(FORECASTERS)}\n")
    torch.set_num_threads(1)
    forgetting = run(args, args.forget_h)
    keeping = run(args, 0.0)
    print(
        f"{args.tenants} tenants per generation, {args.life_h:g} h each, 60-s windows, "
        f"{args.model} calibrated"
    )
    print("| tenants seen | forget after | held | checkpoint MB | never forget: held | MB |")
    print("|---|---|---|---|---|---|")
    after = f"{args.forget_h:g} h" if args.forget_h else "never"
    for (seen, held, mb, _), (_, held0, mb0, _) in zip(forgetting, keeping, strict=True):
        print(f"| {seen} | {after} | {held} | {mb:.1f} | {held0} | {mb0:.1f} |")


if __name__ == "__main__":
    main()
