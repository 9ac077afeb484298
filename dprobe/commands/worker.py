"""Run a stream worker (faust): ingest -> per-tenant event-time windows -> dprobe.features.

Reads dprobe.samples and dprobe.jobs, validates every record (invalid ones go to
dprobe.deadletter with the reason), drops duplicate (host, seq), counts lost snapshots
and emits one TenantWindow per tenant per window. Start more workers with the same
--app-id to scale out: they share the partitions (parallelism <= partitions).

  dprobe worker --window 60 --grace 10
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dprobe.config import WorkerSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app-id", help="consumer group / app id (default dprobe-worker)")
    p.add_argument("--window", type=float, dest="window_s", help="window length in s (default 60)")
    p.add_argument("--grace", type=float, dest="grace_s", help="lateness allowed in s (default 10)")
    p.add_argument("--partitions", type=int, help="partitions of topics the worker creates (4)")
    p.add_argument("--data-dir", help="local state folder (default ~/.cache/dprobe/worker)")
    p.add_argument("--metrics-addr", help="address of /metrics (default 127.0.0.1)")
    p.add_argument("--metrics-port", type=int, help="port of /metrics (default 9402; 0: any)")
    for flag, dest, text in DEMAND_FLAGS:
        p.add_argument(flag, dest=dest, metavar="VALUE", help=text)


# Multi-level demand, planner sizing and damping, and job flow (docs/worker.md,
# docs/planner.md); values are text, converted and checked by dprobe.config like the
# environment's.
DEMAND_FLAGS = (
    ("--plan-quantile", "plan_quantile", "forecast quantile quotas follow: p50 or p90 (p90)"),
    ("--plan-headroom", "plan_headroom", "quota = forecast x (1 + headroom) (0)"),
    ("--plan-tolerance", "plan_tolerance", "a change within this share is none (0.1)"),
    ("--plan-cooldown-s", "plan_cooldown_s", "no reversal of a move within this long (60)"),
    (
        "--plan-scale-down-stabilization-s",
        "plan_scale_down_stabilization_s",
        "shrink only to the highest target of this long (300)",
    ),
    (
        "--plan-scale-up-stabilization-s",
        "plan_scale_up_stabilization_s",
        "grow only to the lowest target of this long (0)",
    ),
    ("--plan-period-s", "plan_period_s", "period of the rate limits, in s (15)"),
    (
        "--plan-scale-up-max-percent",
        "plan_scale_up_max_percent",
        "grow a quota per period by at most this %% ... (100)",
    ),
    ("--plan-scale-up-max-nodes", "plan_scale_up_max_nodes", "... or this many nodes (4)"),
    (
        "--plan-scale-down-max-percent",
        "plan_scale_down_max_percent",
        "shrink a quota per period by at most this %% (100)",
    ),
    ("--plan-urgent-first", "plan_urgent_first", "waiting jobs before forecasts (true)"),
    ("--level-weights", "level_weights", "GPUs per instance of L1,L2,L3,EX (0.3,0.5,0.7,1.0)"),
    ("--level-l1-max-util-pct", "level_l1_max_util_pct", "L1: GPU util below (25)"),
    ("--level-l1-max-mem-bytes", "level_l1_max_mem_bytes", "L1: GPU memory below (3e9)"),
    ("--level-l3-min-util-pct", "level_l3_min_util_pct", "L3: GPU util above (70)"),
    ("--level-l3-min-sm-util-pct", "level_l3_min_sm_util_pct", "L3: SM util above (70)"),
    ("--level-ex-min-mem-frac", "level_ex_min_mem_frac", "EX: memory share at least (0.9)"),
    ("--profile-pending", "profile_pending", "level queued jobs with the profiler (true)"),
    (
        "--unknown-pending-level",
        "unknown_pending_level",
        "level of a queued job never levelled (EX)",
    ),
    ("--flow-edges-s", "flow_edges_s", "job-flow bucket edges in s (60,240,...,245760)"),
    (
        "--forget-tenant-after-s",
        "forget_tenant_after_s",
        "forget a tenant silent this long (604800; 0: never)",
    ),
)


def check_model(s: WorkerSettings) -> None:
    """Refuse a ``model`` no forecaster is registered under (names only: no torch yet)."""
    from dprobe.errors import UsageError
    from dprobe.models.forecast.registry import canonical_name

    try:
        canonical_name(s.model)
    except ValueError as exc:
        raise UsageError(f"worker.model: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from dprobe.streams.startup_stop import noting_stop_signals

    with noting_stop_signals():  # SIGTERM, Ctrl-C while faust loads: a clean stop once loaded
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    import asyncio

    from dprobe.commands._common import settings
    from dprobe.config import WorkerSettings

    s = settings(
        WorkerSettings,
        args,
        app_id=args.app_id,
        window_s=args.window_s,
        grace_s=args.grace_s,
        partitions=args.partitions,
        data_dir=args.data_dir,
        metrics_addr=args.metrics_addr,
        metrics_port=args.metrics_port,
        **{dest: getattr(args, dest) for _, dest, _ in DEMAND_FLAGS},
    )
    from dprobe.folders import check_writable

    check_model(s)  # before any topic is made or Kafka is asked
    from dprobe.streams.runner import run_worker  # faust: imported once the settings hold

    check_writable(s.data_dir, "worker.data_dir")  # said before a loop is made for faust
    asyncio.set_event_loop(asyncio.new_event_loop())
    return run_worker(s, loglevel=args.log_level)
