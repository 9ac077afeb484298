"""Many tenants on one worker: does it keep up, with steady memory?

Live traffic on a local single-node Kafka: ``--hosts`` hosts send one snapshot a second
(event time = wall time), each with ``--procs`` processes spread over ``--tenants``
tenants (by default 50 hosts x 100 processes = 5,000 tenants of one process each). One
``dprobe worker`` process (60-s windows, grace 10 s) ingests, windows, forecasts
(``--model``) and plans. Every ``--every`` seconds the script prints the worker's resident
memory (RSS), its lag on the samples topic (snapshots produced minus committed) and the
windows and scaling events emitted so far; at the end, the peak RSS, the RSS growth over
the second half of the run, the lag at the end, and how many windows each closed minute
produced against how many the traffic makes (one per tenant). The worker's capacity is
the traffic's fleet (8 GPUs per host).

    python benchmarks/tenants_at_scale.py [--tenants 5000] [--seconds 240] [--json]

Uses KAFKA_BOOTSTRAP when set, else starts the project's local broker on free ports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._counts import at_least
from benchmarks.worker_throughput import (
    WorkerExited,
    check_running,
    committed,
    create_topics,
    end_total,
    kafka_bootstrap,
)
from dprobe import schema
from dprobe.models.forecast.registry import FORECASTERS
from tests.streams.helpers import worker_process

PARTITIONS = 4
GPUS = 8
GB = 1_000_000_000


def snapshot(host: int, seq: int, ts: float, procs: int, tenants: int) -> schema.HostSnapshot:
    """Host ``host``'s snapshot: ``procs`` processes on 8 GPUs, process ``p`` of tenant
    ``(host * procs + p) % tenants``; utilisation varies slowly with time."""
    gpus = tuple(
        schema.Gpu(uuid=f"GPU-{host}-{i}", index=i, util=50.0 + 40.0 * ((seq // 60 + i) % 2),
                   mem_util=50.0, mem_used=20 * GB, mem_total=80 * GB, power_w=300.0)
        for i in range(GPUS)
    )  # fmt: skip
    ps = tuple(
        schema.Proc(pid=1000 + p, gpu=f"GPU-{host}-{p % GPUS}",
                    tenant=f"vc-{(host * procs + p) % tenants:05d}", job=f"job-{host}-{p}",
                    sm_util=float((seq + p) % 100), mem_util=30.0, mem_used=GB)
        for p in range(procs)
    )  # fmt: skip
    return schema.HostSnapshot(
        host=f"node-{host:03d}", ts=ts, interval_s=1.0, seq=seq, gpus=gpus, procs=ps
    )


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its children (the worker may fork helpers)."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def _children(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    out = [int(k) for k in kids]
    return out + [g for k in out for g in _children(k)]


async def run(args: argparse.Namespace, bootstrap: str, tmp: Path) -> dict[str, Any]:
    prefix = f"s{uuid.uuid4().hex[:6]}."
    app_id = f"scale-{uuid.uuid4().hex[:6]}"
    await create_topics(bootstrap, prefix, PARTITIONS)
    samples_topic = f"{prefix}samples"
    rows: list[dict[str, float]] = []
    log = tmp / f"{app_id}.log"
    env = {
        "DPROBE_WORKER_MODEL": args.model,
        "DPROBE_WORKER_CAPACITY_GPUS": str(args.hosts * GPUS),  # the fleet the traffic has
    }
    with worker_process(
        bootstrap, prefix=prefix, app_id=app_id, data_dir=tmp / app_id, window_s=60.0,
        grace_s=10.0, partitions=PARTITIONS, log=log, env=env,
    ) as worker:  # fmt: skip
        await asyncio.sleep(12)  # the worker joins its group
        check_running([worker], [log])
        prod = AIOKafkaProducer(
            bootstrap_servers=bootstrap, linger_ms=20, acks="all", max_batch_size=1 << 20,
            compression_type="lz4",
        )  # fmt: skip
        features = AIOKafkaConsumer(
            f"{prefix}features", f"{prefix}scaling-events", bootstrap_servers=bootstrap,
            auto_offset_reset="earliest", group_id=None,
        )  # fmt: skip
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        windows = events = 0
        per_start: dict[float, int] = {}
        async with prod, features:
            start = time.time()
            next_report = start + args.every
            seq = 0
            while time.time() - start < args.seconds:
                tick = time.time()
                for h in range(args.hosts):
                    s = snapshot(h, seq, tick, args.procs, args.tenants)
                    await prod.send(samples_topic, key=s.host.encode(), value=schema.encode(s))
                seq += 1
                check_running([worker], [log])
                got = await features.getmany(timeout_ms=1)
                for tp, records in got.items():
                    if tp.topic.endswith("features"):
                        windows += len(records)
                        for r in records:
                            ws = schema.decode_window(r.value).window_start
                            per_start[ws] = per_start.get(ws, 0) + 1
                    else:
                        events += len(records)
                if time.time() >= next_report:
                    next_report += args.every
                    end = await end_total(features, samples_topic, PARTITIONS)
                    done = await committed(admin, app_id, samples_topic)
                    row = {
                        "t_s": round(time.time() - start, 1),
                        "rss_gb": rss_bytes(worker.pid) / GB,
                        "lag_snapshots": end - done,
                        "windows": windows,
                        "events": events,
                    }
                    rows.append(row)
                    print(
                        f"t={row['t_s']:6.1f}s rss {row['rss_gb']:.2f} GB  lag "
                        f"{row['lag_snapshots']:6d} snapshots  windows {windows:7d}  "
                        f"events {events:5d}",
                        flush=True,
                    )
                await asyncio.sleep(max(0.0, 1.0 - (time.time() - tick)))
            produced = seq * args.hosts
        await admin.close()
    half = [r["rss_gb"] for r in rows if r["t_s"] >= args.seconds / 2]
    return {
        "tenants": args.tenants,
        "hosts": args.hosts,
        "procs_per_host": args.procs,
        "seconds": args.seconds,
        "snapshots_produced": produced,
        "rss_peak_gb": max(r["rss_gb"] for r in rows) if rows else 0.0,
        "rss_growth_second_half_gb": (half[-1] - half[0]) if len(half) > 1 else 0.0,
        "lag_end_snapshots": rows[-1]["lag_snapshots"] if rows else None,
        "lag_max_snapshots": max(r["lag_snapshots"] for r in rows) if rows else None,
        "windows": windows,
        "windows_per_window_start": [per_start[k] for k in sorted(per_start)],
        "windows_per_window_start_expected": min(args.tenants, args.hosts * args.procs),
        "scaling_events": events,
        "rss_median_gb": statistics.median(r["rss_gb"] for r in rows) if rows else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tenants", type=int, default=5000)
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--procs", type=int, default=100, help="processes per host")
    ap.add_argument("--seconds", type=float, default=240.0)
    ap.add_argument("--every", type=float, default=15.0, help="report interval (s)")
    ap.add_argument("--model", default="dprobe-mmoe", help="the worker's forecaster")
    ap.add_argument("--json", action="store_true", help="print one JSON object last")
    args = ap.parse_args()
    at_least(ap, args, "--tenants", "--hosts", "--procs")
    for flag, seconds in (("--seconds", args.seconds), ("--every", args.every)):
        if not 0 < seconds < math.inf:
            ap.exit(2, f"{ap.prog}: {flag} must be > 0 seconds, got {seconds:g}\n")
    if args.model not in FORECASTERS:
        ap.exit(2, f"{ap.prog}: --model {args.model!r}: choose from {', '.join(FORECASTERS)}\n")
    with tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        bootstrap = kafka_bootstrap(stack, tmp)
        try:
            out = asyncio.run(run(args, bootstrap, tmp))
        except WorkerExited as exc:  # its own error, such as a bad DPROBE_WORKER_* setting
            ap.exit(2 if exc.code == 2 else 1, f"{ap.prog}: {exc}\n")
        except KafkaConnectionError:  # no broker at KAFKA_BOOTSTRAP: one line, exit 2
            ap.exit(2, f"{ap.prog}: cannot reach Kafka at {bootstrap}: no broker answered\n")
    print(
        f"{out['tenants']} tenants, {out['hosts']} hosts x {out['procs_per_host']} processes "
        f"at 1 Hz for {out['seconds']:.0f} s: RSS peak {out['rss_peak_gb']:.2f} GB, growth "
        f"over the second half {out['rss_growth_second_half_gb']:+.2f} GB; lag at the end "
        f"{out['lag_end_snapshots']} snapshots (max {out['lag_max_snapshots']}); windows per "
        f"closed minute {out['windows_per_window_start']} (traffic makes "
        f"{out['windows_per_window_start_expected']:,}); {out['scaling_events']} scaling events"
    )
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
