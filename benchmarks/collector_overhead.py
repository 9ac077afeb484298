"""Benchmark: the collector's own CPU time per tick (synthetic backend, 8 GPUs x 8 procs).

Runs the real collector (read, clean and attribute, encode, spool with fsync, produce to a
real Kafka broker with zstd, await delivery) at a paced interval, and reports the CPU time
of this process (all threads) per tick, the median of several runs. Target: <= 10 ms CPU
per tick, i.e. <= 1 % of one core at a 1 s interval. The synthetic backend's own share is
measured separately and shown, since on a GPU node NVML's time replaces it.

Usage:
    python benchmarks/collector_overhead.py                  # starts a temporary broker
    python benchmarks/collector_overhead.py --bootstrap 127.0.0.1:9092 --runs 5 --ticks 200
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError
from prometheus_client import CollectorRegistry

from benchmarks._counts import at_least
from dprobe.broker import LocalBroker
from dprobe.clock import AcceleratedClock, ManualClock
from dprobe.collectors.assemble import build_collector
from dprobe.collectors.synthetic import SyntheticBackend
from dprobe.config import BrokerSettings, CollectorSettings, KafkaSettings
from dprobe.count_text import count_of


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def backend_cpu_ms(gpus: int, procs: int, ticks: int) -> float:
    """CPU ms per read of the synthetic backend alone."""
    backend = SyntheticBackend(gpus=gpus, procs_per_gpu=procs, saturate=True, seed=1)
    clock = ManualClock()
    backend.read_at(clock.now())
    t0 = time.process_time()
    for _ in range(ticks):
        clock.advance(1.0)
        backend.read_at(clock.now())
    return (time.process_time() - t0) * 1000 / ticks


async def one_run(bootstrap: str, args: argparse.Namespace, workdir: Path) -> tuple[float, int]:
    topic = f"bench-collector-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    speed = 1.0 / args.interval  # one clock second per paced tick
    clock = AcceleratedClock(speed=speed)
    run_dir = workdir / topic
    settings = CollectorSettings(
        kafka=KafkaSettings(bootstrap=bootstrap),
        host_id="bench-host",
        interval_s=1.0,
        spool_dir=run_dir / "spool",
        state_dir=run_dir / "state",
        spool_fsync=not args.no_fsync,
    )
    backend = SyntheticBackend(
        host="bench-host", gpus=args.gpus, procs_per_gpu=args.procs, saturate=True, clock=clock
    )
    registry = CollectorRegistry()
    warm, done = asyncio.Event(), asyncio.Event()
    taken = 0

    def on_snapshot(_snap: object) -> None:
        nonlocal taken
        taken += 1
        if taken == 5:
            warm.set()
        if taken == 5 + args.ticks:
            done.set()

    collector = build_collector(
        settings,
        registry=registry,
        clock=clock,
        backend=backend,
        topic=topic,
        on_snapshot=on_snapshot,
    )
    assert collector.sender is not None
    await collector.start()
    try:
        await warm.wait()
        await collector.sender.flush(60)  # connected, caught up
        ticks0, cpu0 = collector.ticks, time.process_time()
        await done.wait()
        await collector.sender.flush(60)  # everything taken is also delivered
        cpu1, ticks1 = time.process_time(), collector.ticks
        if collector.spool.pending_records:
            raise RuntimeError("Kafka did not confirm every snapshot")
    finally:
        await collector.stop()
    procs = int(registry.get_sample_value("dprobe_collector_processes") or 0)
    return (cpu1 - cpu0) * 1000 / (ticks1 - ticks0), procs


async def main_async(args: argparse.Namespace) -> None:
    broker = None
    bootstrap = args.bootstrap
    with tempfile.TemporaryDirectory() as tmp:
        if not bootstrap:
            broker = LocalBroker(
                BrokerSettings(
                    port=free_port(), controller_port=free_port(), state_dir=Path(tmp) / "b"
                )
            )
            print("starting a temporary local Kafka broker ...", flush=True)
            await asyncio.to_thread(broker.start)
            bootstrap = broker.bootstrap
        try:
            results = []
            for i in range(args.runs):
                ms, procs = await one_run(bootstrap, args, Path(tmp))
                results.append(ms)
                print(f"run {i + 1}: {ms:.2f} ms CPU per tick ({procs} processes)", flush=True)
        finally:
            if broker is not None:
                await asyncio.to_thread(broker.stop)
    med = statistics.median(results)
    syn = statistics.median(backend_cpu_ms(args.gpus, args.procs, 500) for _ in range(3))
    print()
    print(
        f"collector, {args.gpus} GPUs x {args.procs} processes, zstd, acks=all, "
        f"spool fsync={'off' if args.no_fsync else 'on'}, "
        f"{count_of(args.runs, 'run')} x {count_of(args.ticks, 'tick')}"
    )
    print(
        f"  median CPU per tick (all threads) : {med:.2f} ms   (min {min(results):.2f}, "
        f"max {max(results):.2f})"
    )
    print(f"  of which synthetic backend        : {syn:.2f} ms")
    print(f"  excluding the backend             : {med - syn:.2f} ms")
    print(f"  share of one core at 1 s interval : {med / 10:.2f} %   (target <= 1 %)")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--bootstrap", help="Kafka to produce to (default: start a temporary broker)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--ticks", type=int, default=200, help="ticks measured per run")
    p.add_argument("--interval", type=float, default=0.05, help="wall seconds between ticks")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--procs", type=int, default=8, help="processes per GPU")
    p.add_argument("--no-fsync", action="store_true", help="do not fsync the spool")
    args = p.parse_args()
    at_least(p, args, "--runs", "--ticks", "--gpus", "--procs")
    if not 0 < args.interval < math.inf:
        p.exit(2, f"{p.prog}: --interval must be > 0 seconds, got {args.interval:g}\n")
    logging.basicConfig(level=logging.WARNING)
    try:
        asyncio.run(main_async(args))
    except KafkaConnectionError:  # no broker at --bootstrap: one line, exit 2
        where = args.bootstrap or "the temporary broker"
        p.exit(2, f"{p.prog}: cannot reach Kafka at {where}: no broker answered\n")


if __name__ == "__main__":
    main()
