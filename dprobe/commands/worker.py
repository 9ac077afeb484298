"""Run a stream worker (faust): ingest -> per-tenant event-time windows -> dprobe.features.

Reads dprobe.samples and dprobe.jobs, validates every record (invalid ones go to
dprobe.deadletter with the reason), drops duplicate (host, seq), counts lost snapshots
and emits one TenantWindow per tenant per window. Start more workers with the same
--app-id to scale out: they share the partitions (parallelism <= partitions).

  dprobe worker --window 60 --grace 10
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app-id", help="consumer group / app id (default dprobe-worker)")
    p.add_argument("--window", type=float, dest="window_s", help="window length in s (default 60)")
    p.add_argument("--grace", type=float, dest="grace_s", help="lateness allowed in s (default 10)")
    p.add_argument("--partitions", type=int, help="partitions of topics the worker creates (4)")
    p.add_argument("--data-dir", help="local state folder (default ~/.cache/dprobe/worker)")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from dprobe.commands._common import settings
    from dprobe.config import WorkerSettings
    from dprobe.streams.runner import run_worker

    s = settings(
        WorkerSettings,
        args,
        app_id=args.app_id,
        window_s=args.window_s,
        grace_s=args.grace_s,
        partitions=args.partitions,
        data_dir=args.data_dir,
    )
    asyncio.set_event_loop(asyncio.new_event_loop())
    return run_worker(s, loglevel=args.log_level)
