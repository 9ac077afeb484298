"""Per-window cost of learn_one + forecast for N tenants, and the state memory they need.

What a stream worker does when a window closes: every tenant's window is learned, then
every tenant gets a forecast at 10 min, 1 h and 6 h. The worker runs every model with
its p90 calibrated online (``make_forecaster(..., calibrate=True)``), so that is what is
timed; ``dprobe-mmoe (uncalibrated)`` is timed too, to show what calibration adds. The
budget (DESIGN.md §6) is 200 ms per window for 100 tenants on one core. Synthetic demand
(daily wave + steps + noise) with a job flow in every window (8-GPU jobs of random ages,
a job submitted and one finished per window), so ``job-aware`` and ``dprobe-mmoe-jobs``
do their full work; 10-minute windows; the models are warmed up first (replay
buffer full enough to train, calibration past its first matured 6-hour forecasts), then
each window is timed. Medians over ``--repeats`` runs are printed.

    .venv/bin/python benchmarks/forecast_throughput.py [--tenants 100] [--windows 100]
"""

from __future__ import annotations

import argparse
import io
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks._counts import at_least
from dprobe.models.forecast.base import Forecaster
from dprobe.models.forecast.registry import make_forecaster
from dprobe.models.job_flow import ActiveJob, FlowEvent, job_flow
from dprobe.schema import LevelCounts, TenantWindow

STEP = 600.0
HORIZONS = (600.0, 3600.0, 21600.0)


def windows_at(n: int, tenants: int, rng: random.Random) -> list[TenantWindow]:
    out = []
    for t in range(tenants):
        base = 8 + 4 * (t % 16)
        y = base * (1 + 0.3 * math.sin(2 * math.pi * n / 144 + t)) + rng.choice((0, 0, 0, 8))
        pending = rng.choice((0.0, 0.0, 0.0, 8.0))
        end = (n + 1) * STEP
        running = [ActiveJob(8.0, end - age, end - age) for age in _ages(y, rng)]
        queued = [ActiveJob(pending, end - 300.0)] if pending else []
        events = [FlowEvent("submit", 8.0), FlowEvent("finish", 8.0, run_s=rng.uniform(60, 9e4))]
        out.append(
            TenantWindow(
                tenant=f"vc-{t:03d}",
                window_start=n * STEP,
                window_end=(n + 1) * STEP,
                hosts=4,
                gpus_busy=y,
                instances=y / 2,
                util_sum=50 * y,
                level_counts=LevelCounts(L2=int(y // 2)),
                effective_demand_gpus=y * 0.6,
                pending_gpus=pending,
                running_gpus=y,
                quota_gpus=float(base * 1.5),
                flow=job_flow(running + queued, events, end=end),
            )
        )
    return out


def _ages(gpus: float, rng: random.Random) -> list[float]:
    """Ages (s) of the 8-GPU jobs that make up ``gpus`` running GPUs."""
    return [rng.uniform(0.0, 2e5) for _ in range(int(gpus // 8))]


def state_bytes(model: Forecaster) -> int:
    """Serialised state; for the MMoE, as if its replay buffer were full (steady state)."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    size = len(buf.getvalue())
    b = getattr(getattr(model, "inner", model), "_buffer", None)
    if b is not None:
        row = b.x.itemsize * b.x.shape[1] + 2 * b.y.itemsize * b.y.shape[1] + 4 + 8
        size += (b.capacity - len(b)) * row
    return size


def run_once(
    make: Callable[[], Forecaster], tenants: int, warm: int, timed: int, seed: int
) -> tuple[list[float], int]:
    rng = random.Random(seed)
    model = make()
    for n in range(warm):
        for w in windows_at(n, tenants, rng):
            model.learn_one(w)
    per_window = []
    for n in range(warm, warm + timed):
        ws = windows_at(n, tenants, rng)
        t0 = time.perf_counter()
        for w in ws:
            model.learn_one(w)
        for w in ws:
            model.forecast(w.tenant, HORIZONS)
        per_window.append((time.perf_counter() - t0) * 1000)
    return per_window, state_bytes(model)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--warm", type=int, default=60, help="windows before timing (>= 6 h + K)")
    ap.add_argument("--windows", type=int, default=60, help="timed windows per run")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    at_least(ap, args, "--tenants")
    at_least(ap, args, "--warm", least=0)
    at_least(ap, args, "--windows", "--repeats")
    torch.set_num_threads(1)
    print(f"one core: torch threads={torch.get_num_threads()}, pid {os.getpid()}", file=sys.stderr)
    makers = {
        name: partial(make_forecaster, name, calibrate=True)
        for name in (
            "dprobe-mmoe",
            "dprobe-mmoe-jobs",
            "job-aware",
            "last-value",
            "seasonal-naive",
            "moving-average",
            "holt-winters",
        )
    }
    makers["dprobe-mmoe (uncalibrated)"] = partial(make_forecaster, "dprobe-mmoe")
    print(
        f"{args.tenants} tenants, 10-min windows, learn_one + forecast(3 horizons) per tenant, "
        "p90 calibrated online"
    )
    print(
        f"{'model':26s} {'median ms/window':>17s} {'p95 ms':>8s} {'max ms':>8s} {'state MiB':>10s}"
    )
    for name, make in makers.items():
        medians, p95s, maxes, sizes = [], [], [], []
        for r in range(args.repeats):
            times, size = run_once(make, args.tenants, args.warm, args.windows, seed=r)
            times.sort()
            medians.append(statistics.median(times))
            p95s.append(times[int(0.95 * (len(times) - 1))])
            maxes.append(times[-1])
            sizes.append(size)
        print(
            f"{name:26s} {statistics.median(medians):17.1f} {statistics.median(p95s):8.1f} "
            f"{statistics.median(maxes):8.1f} {statistics.median(sizes) / 2**20:10.2f}"
        )
    print(
        "state = bytes of torch.save(state_dict()); for dprobe-mmoe with its replay buffer "
        "filled to capacity"
    )


if __name__ == "__main__":
    main()
