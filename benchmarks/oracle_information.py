"""What is knowing the future worth to the quota planner, part by part?

On the Helios-calibrated synthetic stream (``dprobe simulate --helios``), over several
seeds and policies, each quota rule below runs under the same reconfiguration costs and
is compared with the reactive rule of the same seed, policy and costs:

- ``predictive``: what ``dprobe simulate --sweep`` runs (the planner with the calibrated,
  gated ``recent-peak`` forecaster unless ``--forecaster`` says otherwise);
- ``told-nothing``: the same planner told nothing of the future (every VC's
  forecast is its demand now);
- ``told-arrivals``: told the jobs that will arrive (when, how many GPUs, how long
  they run), not when the jobs running now end;
- ``told-everything``: told the arrivals and when every running job ends (the
  planner half of the oracle of ``docs/simulation.md``);
- ``predictive-p50``: predictive sizing quotas to the p50 instead of the p90;
- ``predictive-latency-lead``: predictive planning exactly one move latency plus one
  interval ahead (the forecast horizon set to one interval, so at latency 0 it plans
  for the next interval only, not 600 s ahead).

Printed per cost setting and rule: the mean and geometric mean over seeds x policies of
its average queueing delay as a share of reactive's, the runs in which it waited less
than reactive, and the GPU-hours lost to reclaim preemptions (its sum and reactive's).
The default seeds (1, 2, 5-8) are validation seeds: the evaluation sweeps of
docs/simulation.md use seeds 0, 3 and 4.

    .venv/bin/python benchmarks/oracle_information.py --workers 2
    .venv/bin/python benchmarks/oracle_information.py --seeds 1,2 --policies fifo \\
        --cells 900:wait --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Collection
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from functools import cache, partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks._counts import at_least
from dprobe.errors import UsageError
from dprobe.models.planner import Planner
from dprobe.sim.engine import QuotaMode
from dprobe.sim.jobs import SimJob
from dprobe.sim.quota import OracleDemand, PlannerQuota
from dprobe.sim.run import QuotaOf, make_quota, run_quota
from dprobe.sim.seeds import shares
from dprobe.sim.settings import SimSettings
from dprobe.sim.synthetic import SyntheticSettings, generate
from dprobe.traces.jobs_csv import JobRecord

# rule name -> what the planner is told (None: a mode of dprobe simulate)
RULES: dict[str, Collection[str] | None] = {
    "reactive": None,
    "predictive": None,
    "told-nothing": (),
    "told-arrivals": ("arrivals",),
    "told-everything": ("arrivals", "departures"),
    "predictive-p50": None,
    "predictive-latency-lead": None,
}
# predictive variants: rule name -> what it changes in the settings of the run
TWEAKS: dict[str, Callable[[SimSettings], SimSettings]] = {
    "predictive-p50": lambda s: replace(s, planner=replace(s.planner, quantile="p50")),
    "predictive-latency-lead": lambda s: replace(s, horizon_s=s.interval_s),
}


@dataclass(frozen=True)
class Run:
    """One simulation to make: a rule on one seed, policy and cost setting."""

    rule: str
    seed: int
    policy: str
    latency_s: float
    reclaim: str


def quota_of(rule: str) -> QuotaOf:
    """A ``quota_of`` for :func:`run_quota` that builds ``rule``'s quota mode."""
    knows = RULES[rule]

    def build(mode: str, jobs: list[SimJob], s: SimSettings) -> QuotaMode:
        if knows is None:
            return make_quota(mode, jobs, s)
        demand = OracleDemand(jobs, s.lead_s, s.hold_s, knows=knows)
        return PlannerQuota(mode, demand, Planner(s.planner))

    return build


@cache
def _stream(folder: str, days: float, seed: int) -> tuple[list[JobRecord], dict[str, int]]:
    return generate(folder, SyntheticSettings(days=days, seed=seed))


def simulate(
    run: Run, folder: str, days: float, forecaster: str, lend_horizon_s: float | None = None
) -> dict[str, Any]:
    """The figures of one run, as a plain dict."""
    torch.set_num_threads(1)
    records, sizes = _stream(folder, days, run.seed)
    s = SimSettings(
        move_latency_s=run.latency_s,
        reclaim=run.reclaim,
        forecaster=forecaster,
        seed=run.seed,
        lend_horizon_s=lend_horizon_s,
    )
    s = TWEAKS.get(run.rule, lambda same: same)(s)
    if RULES[run.rule] is not None:
        mode = "oracle"
    else:
        mode = "predictive" if run.rule in TWEAKS else run.rule
    r = run_quota(records, sizes, run.policy, mode, quota_of(run.rule), settings=s)
    return {
        **asdict(run),
        "avg_queue_s": r.avg_queue_s,
        "lost_gpu_h": r.lost_gpu_h,
        "node_moves": r.node_moves,
    }


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cost setting and rule: its waits as shares of reactive's, and lost GPU-hours."""
    key = ("seed", "policy", "latency_s", "reclaim")
    reactive = {tuple(r[k] for k in key): r for r in rows if r["rule"] == "reactive"}
    groups: dict[tuple[Any, Any, Any], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for r in rows:
        if r["rule"] == "reactive":
            continue
        base = reactive[tuple(r[k] for k in key)]
        groups.setdefault((r["latency_s"], r["reclaim"], r["rule"]), []).append((r, base))
    out = []
    for (lat, rec, rule), pairs in groups.items():
        share = shares((float(r["avg_queue_s"]), float(b["avg_queue_s"])) for r, b in pairs)
        out.append(
            {
                "latency_s": lat,
                "reclaim": rec,
                "rule": rule,
                "runs": len(pairs),
                "mean_share": share.mean,
                "geo_share": share.geo,
                "below_reactive": share.below,
                "lost_gpu_h": sum(float(r["lost_gpu_h"]) for r, _ in pairs),
                "reactive_lost_gpu_h": sum(float(b["lost_gpu_h"]) for _, b in pairs),
            }
        )
    return out


def _cells(args: argparse.Namespace) -> list[tuple[float, str]]:
    """``--cells`` as (latency, reclaim) pairs, after checking every other flag a run would
    otherwise reject only once the runs have started; a bad one raises ValueError."""
    from dprobe.models.forecast.registry import FORECASTERS
    from dprobe.sim.policies import POLICIES

    if not Path(args.helios).is_dir():
        raise ValueError(f"{args.helios}: no such folder (set DPROBE_TRACE_DIR or pass --helios)")
    if unknown := set(args.rules.split(",")) - set(RULES):
        raise ValueError(f"unknown rules {sorted(unknown)}; choose from {', '.join(RULES)}")
    if unknown := set(args.policies.split(",")) - set(POLICIES):
        raise ValueError(f"unknown policies {sorted(unknown)}; choose from {', '.join(POLICIES)}")
    if args.forecaster not in FORECASTERS:
        raise ValueError(
            f"unknown forecaster {args.forecaster!r}; choose from {', '.join(FORECASTERS)}"
        )
    if not all(s.strip().isdigit() for s in args.seeds.split(",")):
        raise ValueError(f"--seeds {args.seeds!r}: not a list of whole numbers >= 0")
    if not args.days * 24 >= 1:  # as dprobe simulate --days
        raise ValueError(f"--days must be > 0 (at least one hour, 1/24), got {args.days:g}")
    if args.lend_horizon is not None and not args.lend_horizon >= 0:
        raise ValueError(f"--lend-horizon must be >= 0 seconds, got {args.lend_horizon:g}")
    cells = []
    for cell in args.cells.split(","):
        latency, _, reclaim = cell.partition(":")
        try:
            lat = float(latency)
        except ValueError:
            lat = float("nan")
        if not (0 <= lat < float("inf")) or reclaim not in ("wait", "preempt"):
            raise ValueError(
                f"--cells: {cell!r} is not LATENCY:RECLAIM (seconds >= 0, wait or preempt)"
            )
        cells.append((lat, reclaim))
    return cells


def main(argv: list[str] | None = None) -> None:
    default = Path(os.environ.get("DPROBE_TRACE_DIR", "")) / "helios-earth-vcs"
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--helios", default=str(default), help="folder of Helios VC series")
    p.add_argument("--days", type=float, default=7.0)
    p.add_argument("--seeds", default="1,2,5,6,7,8")
    p.add_argument("--policies", default="fifo,sjf,las")
    p.add_argument("--cells", default="0:wait,900:wait,900:preempt", help="latency:reclaim,...")
    p.add_argument("--forecaster", default="recent-peak", help="the predictive rule's model")
    p.add_argument(
        "--lend-horizon",
        type=float,
        default=None,
        metavar="S",
        help="the planner rules' lend horizon (default: the reclaim rule's, as dprobe simulate)",
    )
    p.add_argument("--rules", default=",".join(RULES), help="rules to run (reactive always)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print every run and the summary")
    args = p.parse_args(argv)
    at_least(p, args, "--workers")
    try:
        cells = _cells(args)
        # the series themselves, and --days against them, read once here (as the first
        # seed's run reads them) so that what they cannot give is said before any run
        _stream(args.helios, args.days, int(args.seeds.split(",")[0]))
    except (ValueError, UsageError) as exc:  # checked before any run starts: one line, exit 2
        p.exit(2, f"{p.prog}: {exc}\n")
    runs = [
        Run(rule, int(seed), policy, lat, rec)
        for lat, rec in cells
        for seed in args.seeds.split(",")
        for policy in args.policies.split(",")
        for rule in dict.fromkeys(["reactive", *args.rules.split(",")])
    ]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        one = partial(
            simulate,
            folder=args.helios,
            days=args.days,
            forecaster=args.forecaster,
            lend_horizon_s=args.lend_horizon,
        )
        rows = list(pool.map(one, runs))
    summary = summarise(rows)
    if args.json:
        print(json.dumps({"runs": rows, "summary": summary}, indent=1))
        return
    print(f"seeds {args.seeds}; policies {args.policies}; wait = share of reactive's average")
    print("\n".join(summary_lines(summary)))


def summary_lines(summary: list[dict[str, Any]]) -> list[str]:
    """The table of :func:`summarise`'s rows: a heading, then one line per row."""
    w = max(len(rule) for rule in RULES)
    lines = [
        f"{'latency s':>9s} {'reclaim':>8s} {'rule':>{w}s} {'mean':>6s} {'geo':>6s} "
        f"{'below':>7s} {'lost GPU-h (reactive)':>22s}"
    ]
    for s in summary:
        lines.append(
            f"{s['latency_s']:9.0f} {s['reclaim']:>8s} {s['rule']:>{w}s} "
            f"{s['mean_share']:6.3f} {s['geo_share']:6.3f} "
            f"{s['below_reactive']:>3d}/{s['runs']:<3d} "
            f"{s['lost_gpu_h']:10.0f} ({s['reactive_lost_gpu_h']:.0f})"
        )
    return lines


if __name__ == "__main__":
    main()
