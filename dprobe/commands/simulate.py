"""Trace-driven cluster simulation: queueing delay per scheduling policy and quota mode.

    dprobe simulate --jobs trace_job_Philly_MIX1.csv [--vcs philly_vc.csv]
    dprobe simulate --helios DIR --days 7 --policies fifo las --json
    dprobe simulate --jobs trace.csv --move-latency 900 --reclaim preempt
    dprobe simulate --jobs trace.csv --sweep --workers 2
    dprobe simulate --helios DIR --seeds 0,3,4 --sweep --latencies 0,900 --workers 2

Prints a table of average and p95 queueing delay, average JCT, GPU allocation ratio,
node moves and reconfiguration costs (preemptions, lost GPU-hours, GPU-hours in flight,
waits for lent guaranteed nodes) for every policy x mode, with the reduction of average
queueing delay vs static and reactive quotas, and writes a PNG chart. ``--sweep`` runs
that grid at every move latency of ``--latencies`` x both reclaim rules. ``--json``
prints one JSON list of rows on stdout and nothing else there. ``jobs-csv`` times are
minutes unless ``--time-unit`` says otherwise (or the header names ``submit_time_s`` /
``duration_s``).

``--seeds`` runs the whole grid once per seed (with ``--helios`` a fresh synthetic
stream each; the seed also seeds the learned forecasters) and prints, per cell, the mean
over the seeds and each mode's wait as a share of reactive's in the same seed; the
``--json`` rows then carry their ``seed`` and the chart shows the means.

``--pool`` puts every job in one VC that holds every node and runs it with static quotas
(the only mode it runs): how long jobs would wait with no VC boundaries at all, a
reference no quota mode reaches:

    dprobe simulate --jobs trace.csv --pool
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dprobe.commands._common import (
    checked_seed,
    nonempty_path,
    not_applying,
    positive,
    said_interrupted,
)
from dprobe.commands._step_bound import check_steps, jobs_span_s
from dprobe.count_text import count_of
from dprobe.errors import UsageError
from dprobe.folders import output_file

if TYPE_CHECKING:
    from dprobe.models.planner import PlannerSettings
    from dprobe.sim.settings import SimSettings

POLICIES = ("fifo", "sjf", "srtf", "qssf", "las")
MODES = ("static", "reactive", "predictive", "oracle")
# bounds on the size of a run: more workers only fork processes that wait (and can exhaust
# memory), a larger cluster makes every planning step crawl
MAX_WORKERS = 256
MAX_NODE_SCALE = 100.0
MAX_NODES = 100_000
MAX_TICKS = 1_000_000  # planning intervals over a trace's span, per run


def _names(values: list[str], allowed: tuple[str, ...], what: str, flag: str) -> list[str]:
    out = [v.strip().lower() for item in values for v in item.split(",") if v.strip()]
    if not out:
        raise UsageError(f"{flag}: need one or more of {', '.join(allowed)}")
    bad = [v for v in out if v not in allowed]
    if bad:
        raise UsageError(f"unknown {what} {', '.join(bad)}; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(out))


def _latencies(text: str) -> list[float]:
    try:
        out = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--latencies {text!r}: need seconds separated by commas") from None
    if not out or not all(v >= 0 and v < float("inf") for v in out):
        raise UsageError("--latencies: need one or more finite seconds >= 0")
    return list(dict.fromkeys(out))


def _seeds(text: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--seeds {text!r}: need whole numbers separated by commas") from None
    if not out:
        raise UsageError("--seeds: need one or more seeds")
    for value in out:
        checked_seed(value, "--seeds")
    return list(dict.fromkeys(out))


def _span_text(span_s: float) -> str:
    """A span of jobs as a refusal names it.

    >>> _span_text(2400.0), _span_text(1_296_000.0)
    ('40.0 min, 2400 s', '15.0 days, 1.296e+06 s')
    """
    shown = f"{span_s / 86_400:.1f} days" if span_s >= 86_400 else f"{span_s / 60:.1f} min"
    return f"{shown}, {span_s:g} s"


def _needs_a_forecast(modes: list[str], flag: str) -> None:
    """Refuse ``flag`` (exit 2) unless a mode that forecasts runs.

    >>> _needs_a_forecast(["static", "reactive"], "--horizon")
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: --horizon applies only with --modes predictive or oracle
    """
    if not {"predictive", "oracle"} & set(modes):
        raise UsageError(f"{flag} applies only with --modes predictive or oracle")


def _path(text: str) -> Path:
    """A path flag's value as a :class:`Path` (:func:`nonempty_path`: never empty)."""
    return Path(nonempty_path(text))


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--jobs", type=_path, metavar="PATH", help="a jobs-csv trace")
    src.add_argument(
        "--helios",
        type=_path,
        metavar="DIR",
        help="synthetic jobs calibrated to the Helios Earth VC series in DIR",
    )
    p.add_argument(
        "--vcs",
        type=_path,
        metavar="FILE",
        help="VC sizes, 'vc,node num' (default: philly_vc.csv beside --jobs)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="--jobs without --vcs: N nodes split over the VCs by GPU-time share, each VC "
        "at least the nodes of its largest job (overrides a philly_vc.csv beside --jobs; "
        f"at most {MAX_NODES:,})",
    )
    p.add_argument(
        "--policies",
        nargs="+",
        default=list(POLICIES),
        metavar="P",
        help=f"any of {', '.join(POLICIES)}, space- or comma-separated (default: all)",
    )
    p.add_argument(
        "--modes",
        nargs="+",
        default=None,
        metavar="M",
        help=f"any of {', '.join(MODES)}, space- or comma-separated (default: all; with "
        "--pool static)",
    )
    p.add_argument(
        "--node-scale",
        type=float,
        default=1.0,
        metavar="F",
        help=f"multiply every VC's nodes by F (a smaller or larger cluster; 1), at most "
        f"{MAX_NODE_SCALE:g} and {MAX_NODES:,} nodes in all",
    )
    p.add_argument(
        "--pool",
        action="store_true",
        help="put every job in one VC of all the nodes and run it with static quotas: what "
        "the VC boundaries cost (no quota moves between VCs, so only --modes static)",
    )
    p.add_argument(
        "--time-unit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="--jobs: seconds per time unit of the file (default 60: minutes)",
    )
    p.add_argument(
        "--days",
        type=float,
        default=None,
        metavar="D",
        help="--helios: the first D days of the series, at most the days it holds "
        "(May 2020: 31; default 7)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=None,
        metavar="S",
        help="planning interval in seconds (300); at most a million intervals over the span "
        "of the jobs",
    )
    p.add_argument(
        "--horizon",
        type=float,
        default=None,
        metavar="S",
        help="forecast horizon in seconds (600); at most the span of the jobs",
    )
    p.add_argument(
        "--guarantee",
        type=float,
        default=None,
        metavar="F",
        help="share of each VC's static quota it never lends (0.5)",
    )
    p.add_argument(
        "--move-latency",
        type=float,
        default=None,
        metavar="S",
        help="seconds a node that changes VC serves nobody (300; --sweep: see --latencies)",
    )
    p.add_argument(
        "--reclaim",
        choices=("wait", "preempt"),
        default=None,
        help="how a VC gets its lent nodes back: wait for them to go idle, or preempt the "
        "borrower's jobs on them (wait; --sweep runs both)",
    )
    p.add_argument(
        "--checkpoint-interval",
        type=float,
        default=None,
        metavar="S",
        help="jobs checkpoint every S seconds of work; a reclaim preemption loses the work "
        "since the last one (1800; 0: nothing lost; only with --reclaim preempt or --sweep)",
    )
    p.add_argument(
        "--lend-horizon",
        type=float,
        default=None,
        metavar="S",
        help="predictive and oracle modes keep idle nodes their VC is forecast to need "
        "within S seconds, at most the span of the jobs (default: the checkpoint interval "
        "with --reclaim preempt, 0 with wait)",
    )
    p.add_argument(
        "--no-gate",
        action="store_true",
        help="predictive mode: use forecasts even where they have not been paying",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="run the grid at every --latencies value x reclaim wait and preempt",
    )
    p.add_argument(
        "--latencies",
        default=None,
        metavar="S,S",
        help="--sweep: move latencies in seconds (0,300,900,1800)",
    )
    p.add_argument(
        "--forecaster",
        default=None,
        help="model of the predictive mode: dprobe-mmoe (alias mmoe), dprobe-mmoe-jobs, "
        "last-value, moving-average, holt-winters, seasonal-naive, recent-peak, job-aware "
        "(default dprobe-mmoe; with --sweep recent-peak, which is 10x faster)",
    )
    p.add_argument(
        "--colocate",
        type=_path,
        metavar="CSV",
        help="enable GPU sharing with co-location speeds from this CSV (colocate_info.csv style)",
    )
    p.add_argument(
        "--share-models",
        default=None,
        metavar="M1,M2",
        help="with --colocate: models of 1-GPU jobs that may share (default: those the job "
        "profiler levels L1 or L2)",
    )
    p.add_argument(
        "--worker-planner",
        action="store_true",
        help="plan (predictive, oracle) with the worker's planner settings: plan_quantile, "
        "plan_headroom, damping, rate limits and plan_urgent_first from [worker] of "
        "--config and DPROBE_WORKER_* (default: the planner's defaults)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help=f"parallel processes, 1 to {MAX_WORKERS}; never more than there are runs (1)",
    )
    p.add_argument(
        "--chart",
        default="dprobe-out/simulate.png",
        metavar="PNG",
        help="bar chart file (default dprobe-out/simulate.png; '' for none); a name without "
        "an extension gets .png",
    )
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument(
        "--seed", type=int, default=0, help="synthetic stream and forecaster seed (0)"
    )
    seeds.add_argument(
        "--seeds",
        metavar="S,S",
        help="run the grid once per seed and summarise the cells over them (e.g. 0,3,4)",
    )
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")


# (flag, attribute, the flag it needs or excludes, default): a flag that would be ignored
# is a usage error, not silently dropped
_DEPENDENT = (
    ("--time-unit", "time_unit", "jobs", 60.0),
    ("--days", "days", "helios", 7.0),
    ("--latencies", "latencies", "sweep", "0,300,900,1800"),
    ("--share-models", "share_models", "colocate", ""),
)
_NOT_WITH_SWEEP = (("--move-latency", "move_latency", 300.0), ("--reclaim", "reclaim", "wait"))
_CHECKPOINT = ("--checkpoint-interval", "checkpoint_interval")


def _modes(args: argparse.Namespace) -> list[str]:
    """The modes to run: ``--modes``, else every mode, or static alone with ``--pool``
    (one VC of every node has nothing to move)."""
    if args.modes is None:
        return ["static"] if args.pool else list(MODES)
    modes = _names(args.modes, MODES, "mode", "--modes")
    if args.pool and set(modes) != {"static"}:
        moving = ", ".join(m for m in modes if m != "static")
        raise UsageError(
            f"--pool runs static quotas only (one VC of every node has no quota to move): "
            f"drop --modes {moving}"
        )
    return modes


def _check_combinations(args: argparse.Namespace) -> None:
    """Refuse flags that would do nothing with the others given, then fill in defaults.

    >>> ns = argparse.Namespace(jobs=None, helios="h", sweep=False, colocate=None,
    ...     time_unit=None, days=None, latencies=None, share_models=None,
    ...     move_latency=None, reclaim=None)
    >>> _check_combinations(ns); (ns.days, ns.time_unit, ns.move_latency)
    (7.0, 60.0, 300.0)
    """
    for flag, attr, needs, default in _DEPENDENT:
        if getattr(args, attr) is None:
            setattr(args, attr, default)
        elif not getattr(args, needs):
            raise UsageError(f"{flag} applies only with --{needs.replace('_', '-')}")
    if args.colocate is not None and args.helios is not None:
        raise UsageError(
            "--colocate does not apply with --helios: its synthetic jobs have no model name, "
            "so none would share a GPU"
        )
    for flag, attr, default in _NOT_WITH_SWEEP:
        if getattr(args, attr) is None:
            setattr(args, attr, default)
        elif args.sweep:
            raise UsageError(
                f"{flag} does not apply with --sweep (it runs every --latencies value with "
                "both reclaim rules)"
            )


def _quota_settings(settings: SimSettings, modes: list[str], reclaims: list[str]) -> str:
    """One line: the settings the quota modes other than static run with."""
    parts = [
        f"planning every {settings.interval_s:g} s",
        f"guarantee {settings.guarantee_fraction:g} of each quota",
    ]
    if {"predictive", "oracle"} & set(modes):
        parts.append(f"forecast horizon {settings.horizon_s:g} s")
        holds = {r: dataclasses.replace(settings, reclaim=r).hold_s for r in reclaims}
        parts.append(
            "lend horizon "
            + (
                f"{next(iter(holds.values())):g} s"
                if len(set(holds.values())) == 1
                else " / ".join(f"{h:g} s ({r})" for r, h in holds.items())
            )
        )
    if "predictive" in modes:
        parts.append("forecast gate " + ("on" if settings.gate else "off (--no-gate)"))
    if "preempt" in reclaims:
        parts.append(f"checkpoint every {settings.checkpoint_interval_s:g} s of work (preempt)")
    return "quota settings: " + ", ".join(parts)


def _worker_planner(args: argparse.Namespace, node_gpus: int) -> PlannerSettings:
    """The planner settings ``dprobe worker`` would run with the same ``--config`` and
    environment, on the simulator's nodes of ``node_gpus``; one line says what they are."""
    import os

    from dprobe.config import WorkerSettings, load
    from dprobe.models.worker_planner import planner_settings_of

    file = getattr(args, "config", None) or os.environ.get("DPROBE_CONFIG")
    # a production file's [kafka] may name TLS files this machine has not: never read here
    worker = load(WorkerSettings, file=file, with_kafka=False)
    p = planner_settings_of(worker, node_gpus=node_gpus)
    d = p.damping
    print(
        f"planner as the worker's settings give it: {p.quantile} x (1 + {p.headroom:g}), "
        f"tolerance {d.tolerance:g}, stabilisation up {d.scale_up_stabilization_s:g} s / "
        f"down {d.scale_down_stabilization_s:g} s, per {d.period_s:g} s up at most "
        f"max({d.scale_up_max_percent:g} %, {d.scale_up_max_nodes} nodes) and down "
        f"{d.scale_down_max_percent:g} %, cooldown {d.cooldown_s:g} s, waiting jobs "
        f"{'first' if p.urgent_first else 'not first'}",
        file=sys.stderr,
    )
    return p


def run(args: argparse.Namespace) -> int:
    """Run the command; Ctrl-C ends it with one line saying so (exit 130)."""
    try:
        return _run(args)
    except KeyboardInterrupt:
        return said_interrupted("simulate")


def _run(args: argparse.Namespace) -> int:
    from dprobe.models.forecast.registry import canonical_name
    from dprobe.sim.grid import run_seeds, sweep_settings
    from dprobe.sim.inputs import resolve_vc_nodes
    from dprobe.sim.report import chart, rows, sweep_chart, sweep_table, table
    from dprobe.sim.seeds import mean_cells
    from dprobe.sim.seeds import table as seeds_table
    from dprobe.sim.settings import SimSettings
    from dprobe.traces.jobs_csv import read_jobs

    costs = [(flag, attr) for flag, attr, _ in _NOT_WITH_SWEEP] + [_CHECKPOINT]
    costs_given = [flag for flag, attr in costs if getattr(args, attr) is not None]
    # what the quota modes plan with: given, they apply only where quotas move
    for flag, attr, default in (
        ("--interval", "interval", SimSettings.interval_s),
        ("--horizon", "horizon", SimSettings.horizon_s),
        ("--guarantee", "guarantee", SimSettings.guarantee_fraction),
    ):
        if getattr(args, attr) is None:
            setattr(args, attr, default)
        else:
            costs_given.append(flag)
    unit_flag = "--time-unit" if args.time_unit is not None else None  # given, not defaulted
    _check_combinations(args)
    policies = _names(args.policies, POLICIES, "policy", "--policies")
    modes = _modes(args)
    if args.worker_planner:
        _needs_a_forecast(modes, "--worker-planner")
    try:
        forecaster = canonical_name(
            args.forecaster or ("recent-peak" if args.sweep else "dprobe-mmoe")
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not 1 <= args.workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be within 1 .. {MAX_WORKERS}, got {args.workers}")
    for flag, value in (
        ("--interval", args.interval),
        ("--horizon", args.horizon),
        ("--time-unit", args.time_unit),
    ):
        positive(value, flag)
    if not 0 <= args.guarantee <= 1:
        raise UsageError("--guarantee must be within [0, 1]")
    for flag, value in (
        ("--move-latency", args.move_latency),
        ("--checkpoint-interval", args.checkpoint_interval),
        ("--lend-horizon", args.lend_horizon),
    ):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"{flag} must be a finite number >= 0, got {value:g}")
    # a bad value is named before whether it applies
    if args.lend_horizon is not None:
        _needs_a_forecast(modes, "--lend-horizon")
    if args.no_gate and "predictive" not in modes:
        raise UsageError("--no-gate applies only with --modes predictive")
    static_by = "--pool" if args.pool else "--modes static"  # what made the run static-only
    if costs_given and set(modes) == {"static"}:
        raise not_applying(costs_given, f"with {static_by} (static quotas never move a node)")
    if args.sweep and set(modes) == {"static"}:
        raise UsageError(
            f"--sweep does not apply with {static_by}: it varies the move latency and the "
            "reclaim rule, and static quotas never move a node"
        )
    if "--horizon" in costs_given:
        _needs_a_forecast(modes, "--horizon")
    if args.checkpoint_interval is None:
        args.checkpoint_interval = SimSettings.checkpoint_interval_s
    elif args.reclaim == "wait" and not args.sweep:
        raise UsageError(
            "--checkpoint-interval applies only with --reclaim preempt or --sweep (a VC that "
            "waits for its lent nodes preempts nothing, so no work is lost)"
        )
    if not (math.isfinite(args.node_scale) and 0 < args.node_scale <= MAX_NODE_SCALE):
        raise UsageError(
            f"--node-scale must be > 0 and at most {MAX_NODE_SCALE:g}, got {args.node_scale:g}"
        )
    if args.nodes is not None and args.nodes < 1:
        raise UsageError("--nodes must be >= 1")
    if args.nodes is not None and args.nodes > MAX_NODES:
        raise UsageError(f"--nodes must be at most {MAX_NODES:,}, got {args.nodes}")
    if args.jobs is None and (args.vcs is not None or args.nodes is not None):
        raise UsageError("--vcs and --nodes size the VCs of --jobs; --helios takes them from "
                         "its series (--node-scale scales them)")  # fmt: skip
    if args.vcs is not None and args.nodes is not None:
        raise UsageError("--vcs and --nodes both size the VCs: give one")
    if not args.days * 24 >= 1:
        raise UsageError("--days must be > 0 (at least one hour, 1/24)")
    latencies = _latencies(args.latencies) if args.sweep else [args.move_latency]
    chart_path = _chart_path(args.chart) if args.chart else None

    def say(text: str) -> None:
        print(text, file=sys.stderr)

    if args.forecaster is not None and "predictive" not in modes:
        say(
            f"warning: --forecaster {args.forecaster} is not used: only --modes predictive "
            "forecasts (the oracle knows the future, reactive and static do not look ahead)"
        )
    seeds = _seeds(args.seeds) if args.seeds is not None else [checked_seed(args.seed, "--seed")]
    if args.jobs is not None:
        records = read_jobs(args.jobs, time_unit_s=args.time_unit, time_unit_flag=unit_flag)
        if not records:
            raise UsageError(f"{args.jobs}: no jobs")
        vc_nodes, origin = resolve_vc_nodes(records, args.jobs, args.vcs, args.nodes, node_gpus=8)
        source = args.jobs.name
        streams = dict.fromkeys(seeds, records)
    else:
        from dprobe.sim.synthetic import SyntheticSettings, days_text, generate

        streams = {}
        for seed in seeds:
            streams[seed], vc_nodes = generate(
                args.helios, SyntheticSettings(days=args.days, seed=seed)
            )
        origin = "VC sizes from the Helios series"
        source = f"synthetic, Helios {args.helios.name}, {days_text(args.days)}"
    if args.node_scale != 1.0:
        from dprobe.sim.inputs import scale_nodes

        vc_nodes = scale_nodes(vc_nodes, args.node_scale)
        origin += f", every VC scaled x{args.node_scale:g}"
    if sum(vc_nodes.values()) > MAX_NODES:
        given = (
            f"--node-scale {args.node_scale:g}"
            if args.node_scale != 1.0
            else f"--vcs {args.vcs}"
            if args.vcs
            else "the VC sizes"
        )
        raise UsageError(
            f"{given}: {sum(vc_nodes.values()):,} nodes in all, more than a simulation runs "
            f"in reasonable time (at most {MAX_NODES:,})"
        )
    if args.pool:
        from dprobe.sim.inputs import pool_vcs

        pooled = {seed: pool_vcs(records, vc_nodes) for seed, records in streams.items()}
        streams = {seed: records for seed, (records, _) in pooled.items()}
        vc_nodes = pooled[seeds[0]][1]
        origin += ", pooled into one VC"
    cluster_gpus = sum(vc_nodes.values()) * SimSettings.node_gpus
    if not any(0 < r.num_gpu <= cluster_gpus for records in streams.values() for r in records):
        # every job would be left out: a table of zeros says nothing
        raise UsageError(
            f"{args.jobs or args.helios}: no job to simulate: every job asks for 0 GPUs or "
            f"more than the cluster's {cluster_gpus:,} GPUs"
        )
    if set(modes) != {"static"}:  # quota modes plan every interval while jobs run or wait
        span_s = jobs_span_s(streams.values())
        check_steps(
            "--interval",
            args.interval,
            span_s=span_s,
            per_step=1,
            noun="planning intervals",
            most=MAX_TICKS,
        )
        # given (a default is never refused): a forecast past the run is never checked, and
        # the forecaster's scoring keeps every one of them pending
        for flag, value in (
            ("--horizon", args.horizon if "--horizon" in costs_given else None),
            ("--lend-horizon", args.lend_horizon),
        ):
            if value is not None and value > span_s:
                raise UsageError(
                    f"{flag} {value:g}: longer than the jobs span ({_span_text(span_s)}), "
                    "so no forecast that far ahead falls within the run"
                )
    sharing = None
    if args.colocate is not None:
        from dprobe.sim.sharing import load_colocation

        names = list(dict.fromkeys(m.strip() for m in args.share_models.split(",") if m.strip()))
        # a job shares only if its model is named exactly: a name no job has changes nothing
        known = {r.model_name for records in streams.values() for r in records}
        unknown = [m for m in names if m not in known]
        if unknown:
            have = sorted(known - {""})
            shown = ", ".join(have[:8]) + (f" and {len(have) - 8} more" if len(have) > 8 else "")
            raise UsageError(
                f"--share-models: no job of the trace has model {', '.join(unknown)} "
                f"(names are matched exactly; its models: {shown or 'none'})"
            )
        sharing = load_colocation(args.colocate, names or None)
    planner = _worker_planner(args, SimSettings.node_gpus) if args.worker_planner else None
    settings = SimSettings(
        interval_s=args.interval,
        horizon_s=args.horizon,
        guarantee_fraction=args.guarantee,
        forecaster=forecaster,
        move_latency_s=args.move_latency,
        reclaim=args.reclaim,
        checkpoint_interval_s=args.checkpoint_interval,
        lend_horizon_s=args.lend_horizon,
        gate=not args.no_gate,
    )
    if planner is not None:
        settings = dataclasses.replace(settings, planner=planner)
    reclaims = ["wait", "preempt"] if args.sweep else [args.reclaim]
    # the grid runs static once per seed and policy (it ignores moves), every other mode
    # once per move latency x reclaim rule: no more processes than that
    dynamic = len([m for m in modes if m != "static"])
    n_runs = (
        len(streams)
        * len(policies)
        * (int("static" in modes) + dynamic * len(latencies) * len(reclaims))
    )
    workers = max(1, min(args.workers, n_runs))
    jobs = _per_seed([len(r) for r in streams.values()], "job")
    say(
        f"{jobs} ({source}); {count_of(len(vc_nodes), 'VC')}, "
        f"{count_of(sum(vc_nodes.values()), 'node')}; "
        f"{origin}" + (f"; seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else "")
    )
    if dynamic:  # what the quota modes ran with, so that a saved report says it
        say(_quota_settings(settings, modes, reclaims))
    t0 = time.perf_counter()
    results = run_seeds(
        streams,
        vc_nodes,
        policies,
        modes,
        sweep_settings(settings, latencies, reclaims),
        sharing=sharing,
        workers=workers,
        progress=sys.stderr.isatty(),  # a log file gets no \r-redrawn bar
        label=f"simulate, {len(seeds)} seeds" if len(seeds) > 1 else "simulate",
    )
    wall = time.perf_counter() - t0
    skipped = _per_seed(
        [next((r.skipped for r in results if r.seed == k), 0) for k in seeds], "job"
    )
    # static runs once per seed and policy and is shown in every latency x reclaim cell
    shown = (
        f" ({len(results)} cells: static run once per policy"
        f"{' and seed' if len(seeds) > 1 else ''}, shown under every latency and reclaim rule)"
        if len(results) != n_runs
        else ""
    )
    say(
        f"{count_of(n_runs, 'run')}{shown} in {wall:.1f} s; {skipped} left out (0 GPUs or larger "
        "than the cluster)"
        + (f"; predictive forecaster: {forecaster}" if "predictive" in modes else "")
    )
    for r in results:
        if r.unfinished:
            them = "it" if r.unfinished == 1 else "them"
            say(
                f"warning: {r.policy}/{r.mode} (seed {r.seed}): {count_of(r.unfinished, 'job')} "
                f"never finished (no room for {them} in their VC in this mode); its averages "
                f"leave {them} out, so it compares badly with the other cells (column "
                "'unfinished')"
            )
    several = len(seeds) > 1
    # the results first: a chart that cannot be written must not lose a finished run
    if args.json:
        json.dump(rows(results), sys.stdout)
        sys.stdout.write("\n")
    elif several:
        print(seeds_table(results))
    elif args.sweep:
        print(sweep_table(results))
    else:
        print(table(results))
    sys.stdout.flush()
    if chart_path is not None:
        try:
            draw = sweep_chart if args.sweep else chart
            title = f"Queueing delay ({source}" + (
                f", mean of {len(seeds)} seeds)" if several else ")"
            )
            drawn = draw(mean_cells(results) if several else results, chart_path, title=title)
        except OSError as exc:
            raise UsageError(
                f"--chart {args.chart}: {exc.strerror or exc} (the results are printed; "
                "only the chart is missing)"
            ) from None
        say(f"chart written to {drawn}")
    return 0


def _chart_path(text: str) -> Path:
    """The file ``--chart`` will write, checked before the run: a name without an
    extension gets ``.png`` (as matplotlib would add on its own) unless it names a device
    such as ``/dev/null``, an extension must be a format matplotlib writes, and the file
    must be writable (not a directory)."""
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(text)
    try:
        is_dir = path.is_dir()
        device = path.exists() and not is_dir and not path.is_file()
    except OSError:  # cannot look: output_file says why
        is_dir = device = False
    if path.name and not path.suffix and not is_dir and not device:
        path = path.with_name(path.name + ".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix and path.suffix[1:].lower() not in formats:
        raise UsageError(
            f"--chart {text}: cannot write a {path.suffix} chart; give a file name ending "
            f"in one of {', '.join('.' + f for f in sorted(formats))}"
        )
    out = output_file(path, "--chart", shown=text)
    _probe_folder(out, text)
    return out


def _probe_folder(path: Path, shown: str) -> None:
    """Write and remove a probe file beside ``path`` when its folder is there already: a
    folder that permissions call writable can still refuse files (``/proc``, a read-only
    mount, as root)."""
    import os
    import tempfile

    folder = path.absolute().parent
    if not folder.is_dir():
        return  # made on writing: the nearest existing folder was checked
    try:
        fd, probe = tempfile.mkstemp(prefix=".dprobe-chart-probe-", dir=folder)
    except OSError as exc:
        why = exc.strerror or exc
        raise UsageError(f"--chart {shown}: cannot write in {folder}: {why}") from None
    os.close(fd)
    Path(probe).unlink(missing_ok=True)


def _per_seed(counts: list[int], noun: str) -> str:
    """``counts`` (one per seed) of ``noun`` as one figure when they agree, else ``a/b/c``;
    the noun plural unless every count is 1.

    >>> _per_seed([1], "job"), _per_seed([3, 3], "job"), _per_seed([1, 2], "job")
    ('1 job', '3 jobs', '1/2 jobs')
    >>> _per_seed([30940], "job"), _per_seed([10100, 9987], "job")
    ('30,940 jobs', '10,100/9,987 jobs')
    """
    figures = [f"{n:,}" for n in counts]
    figure = figures[0] if len(set(counts)) == 1 else "/".join(figures)
    return f"{figure} {noun}" if set(counts) == {1} else f"{figure} {noun}s"
