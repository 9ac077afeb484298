"""Do the job-aware inputs pay? The multi-task model with and without them, per seed.

On a jobs trace (Philly/Chronus by default: ``$DPROBE_TRACE_DIR/philly-chronus``), the
windows ``dprobe evaluate --format jobs-csv`` builds (demand and job flow per tenant) are
fed to: last value, the job-aware forecaster, and the multi-task model without and with
the job-aware inputs (``dprobe-mmoe``, ``dprobe-mmoe-jobs``), every model with its p90
calibrated online as the worker runs it. Printed per seed and horizon: p90 pinball loss
(GPUs), p90 coverage and MASE of p50, then the change of the pinball loss that the job
inputs bring (median over seeds).

    .venv/bin/python benchmarks/job_inputs.py --test-start 1970-01-08            # test
    .venv/bin/python benchmarks/job_inputs.py --test-start 1970-01-05 \\
        --test-end 1970-01-08                                                     # validation
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from dprobe.count_text import count_of
from dprobe.errors import UsageError
from dprobe.models.forecast.evaluation import rolling_origin
from dprobe.models.forecast.registry import make_forecaster
from dprobe.traces.job_windows import job_windows
from dprobe.traces.jobs_csv import read_jobs

HORIZONS = (600.0, 3600.0, 21600.0)


def _ts(text: str, flag: str) -> float:
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise ValueError(f"{flag}: not an ISO date: {text!r}") from None


def _inputs(args: argparse.Namespace) -> tuple[float, float, list[Any]]:
    """The test span and the trace's jobs; a bad flag or row raises with a line for the user."""
    start = _ts(args.test_start, "--test-start")
    end = _ts(args.test_end, "--test-end") if args.test_end else float("inf")
    if not start < end:
        raise ValueError("--test-start must be before --test-end")
    if not all(x.strip().isdigit() for x in args.seeds.split(",")):
        raise ValueError(f"--seeds {args.seeds!r}: not a list of whole numbers >= 0")
    if not 0 < args.time_unit < float("inf"):
        raise ValueError(f"--time-unit must be > 0 seconds, got {args.time_unit:g}")
    if not Path(args.trace).exists():
        raise ValueError(f"--trace {args.trace}: not found (set DPROBE_TRACE_DIR or pass --trace)")
    return start, end, list(read_jobs(args.trace, time_unit_s=args.time_unit))


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%MZ")


def _unscorable(windows: list[Any], start: float) -> str | None:
    """Why no forecast of the longest horizon could be scored from ``start``, or None."""
    first = min((w.window_end for w in windows), default=math.inf)
    last = max((w.window_end for w in windows), default=-math.inf)
    if start > last:
        return f"--test-start {_iso(start)} is after the trace's last window ({_iso(last)})"
    if start <= first:
        return (
            f"--test-start {_iso(start)} leaves no window to fit on (the first ends {_iso(first)})"
        )
    if last - start < HORIZONS[-1]:
        return (
            f"the test span {_iso(start)} .. {_iso(last)} ({(last - start) / 3600:.3g} h) is "
            f"shorter than the longest horizon ({HORIZONS[-1] / 3600:g} h): give an earlier "
            "--test-start, a later --test-end or a longer trace"
        )
    return None


def main(argv: list[str] | None = None) -> None:
    default = Path(os.environ.get("DPROBE_TRACE_DIR", "")) / "philly-chronus"
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=str(default / "trace_job_Philly_MIX1.csv"))
    p.add_argument("--time-unit", type=float, default=60.0, help="seconds per trace unit")
    p.add_argument("--test-start", required=True, help="ISO date: the scored span starts")
    p.add_argument("--test-end", default=None, help="ISO date: windows after it are dropped")
    p.add_argument("--seeds", default="0,1,2")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    try:  # every flag and the trace, checked before any model runs: one line, exit 2
        start, end, jobs = _inputs(args)
    except (UsageError, ValueError) as exc:
        p.exit(2, f"{p.prog}: {exc}\n")
    windows = [w for w in job_windows(jobs, 600.0) if w.window_end <= end]
    if why := _unscorable(windows, start):  # the comparison at 6 h needs a 6-h span
        p.exit(2, f"{p.prog}: {why}\n")
    gains: dict[float, list[float]] = {h: [] for h in HORIZONS[1:]}
    print(f"{len(windows)} windows; test from {args.test_start}")
    print(
        f"{'seed':>4s} {'model':>22s} {'horizon':>8s} {'pinball GPUs':>12s} "
        f"{'cover':>6s} {'MASE':>6s}"
    )
    for seed in (int(s) for s in args.seeds.split(",")):
        names = ("last-value", "job-aware", "dprobe-mmoe", "dprobe-mmoe-jobs")
        models = [make_forecaster(n, seed=seed, calibrate=True) for n in names]
        res = rolling_origin(windows, models, HORIZONS, test_start=start, absent_is_zero=True)
        pinball = {(r.model, r.horizon_s): r.pinball_p90 for r in res.rows}
        for r in res.rows:
            print(
                f"{seed:4d} {r.model:>22s} {r.horizon_s / 60:>7g}m {r.pinball_p90:12.3f} "
                f"{r.p90_coverage:6.3f} {r.mase:6.3f}"
            )
        for h, g in gains.items():
            g.append(pinball[("dprobe-mmoe-jobs", h)] / pinball[("dprobe-mmoe", h)] - 1.0)
    for h, g in gains.items():
        print(
            f"job inputs change the multi-task model's pinball p90 at {h / 3600:g} h by "
            f"{statistics.median(g):+.1%} (median of {count_of(len(g), 'seed')}; "
            f"{', '.join(f'{x:+.1%}' for x in g)})"
        )


if __name__ == "__main__":
    main()
