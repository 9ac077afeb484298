"""Stream worker benchmark on a real broker: process samples/s and window-close delay.

Prints, for ``--workers`` worker processes (``dprobe worker``, one consumer group) on a
local single-node Kafka:

1. throughput: a backlog of snapshots (8 GPUs x 8 processes = 64 process samples each by
   default, ``--procs-per-gpu``; hosts spread evenly over the ``--partitions`` partitions of
   the samples topic) is
   produced first; the workers then ingest and window it. Rate = process samples
   committed per second between the first commit made once every worker holds its
   partitions and the moment every snapshot is committed and the internal updates topic
   is drained. Measured in the same run: a bare aiokafka consume-and-decode loop over the
   same topic (the ceiling, one process), and the ratio. Medians (and ranges) of
   ``--runs`` runs.
2. latency: live traffic paced at 1 Hz per host with event time = wall time; for each
   TenantWindow, delay = its Kafka record timestamp - window_end. Target p99 <= grace + 2 s.

    python benchmarks/worker_throughput.py [--snapshots 100000] [--runs 5] [--workers 1]
        [--partitions 4] [--latency-s 60] [--json]

With ``--json`` the last line is one JSON object: ``samples_per_s``, ``bare_samples_per_s``,
``ratio`` (medians; the ratio is each run's own), ``p99_close_delay_s``, ``workers``,
``runs``, plus ``partitions``, ``samples_per_s_range`` and ``samples_per_snapshot``.

Worker settings come from the environment as usual (``DPROBE_WORKER_BATCH_MAX=2000
python benchmarks/worker_throughput.py`` measures another batch size). Uses
KAFKA_BOOTSTRAP when set, else starts the project's local broker on free ports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import GroupCoordinatorNotAvailableError, KafkaConnectionError
from aiokafka.structs import TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._counts import at_least
from dprobe import schema
from dprobe.broker import LocalBroker
from dprobe.config import BrokerSettings
from tests.conftest import _free_port
from tests.streams.helpers import worker_process

GB = 1_000_000_000
TENANTS = [f"vc-{i}" for i in range(8)]
PROCS_PER_GPU = 8  # --procs-per-gpu: a snapshot carries 8 x this process samples


def snapshot(rng: random.Random, host: str, seq: int, ts: float) -> schema.HostSnapshot:
    gpus = []
    procs = []
    for i in range(8):
        uuid_ = f"GPU-{host}-{i}"
        gpus.append(
            schema.Gpu(
                uuid=uuid_,
                index=i,
                util=rng.uniform(0, 100),
                mem_util=50.0,
                mem_used=40 * GB,
                mem_total=80 * GB,
                power_w=350.0,
            )
        )
        for j in range(PROCS_PER_GPU):
            procs.append(
                schema.Proc(
                    pid=1000 + 8 * i + j,
                    gpu=uuid_,
                    tenant=rng.choice(TENANTS),
                    job=f"job-{i}",
                    sm_util=rng.uniform(0, 100),
                    mem_util=rng.uniform(0, 100),
                    mem_used=4 * GB,
                )
            )
    return schema.HostSnapshot(
        host=host, ts=ts, interval_s=1.0, seq=seq, gpus=tuple(gpus), procs=tuple(procs)
    )


async def create_topics(bootstrap: str, prefix: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(f"{prefix}{t}", partitions, 1)
                for t in ("samples", "jobs", "features", "deadletter", "scaling-events")
            ]
        )
    finally:
        await admin.close()


async def produce_backlog(bootstrap: str, topic: str, n: int, hosts: int, partitions: int) -> None:
    rng = random.Random(1)
    t0 = time.time() - n / hosts - 3600
    values = [
        (
            f"h{k % hosts}",
            schema.encode(snapshot(rng, f"h{k % hosts}", k // hosts, t0 + k // hosts)),
        )
        for k in range(n)
    ]
    # A tail of live-looking snapshots so every window of the backlog closes.
    prod = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=20,
        acks="all",
        max_batch_size=1 << 20,
        compression_type="lz4",
    )
    async with prod:
        for k, (host, value) in enumerate(values):  # host h on partition h % partitions
            await prod.send(topic, key=host.encode(), value=value, partition=k % hosts % partitions)
        await prod.flush()


async def committed(admin: AIOKafkaAdminClient, group: str, topic: str) -> int:
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    except GroupCoordinatorNotAvailableError:  # the group has not committed yet
        return 0
    return sum(m.offset for tp, m in offsets.items() if tp.topic == topic and m.offset > 0)


async def end_total(consumer: AIOKafkaConsumer, topic: str, partitions: int) -> int:
    ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    return sum(ends.values())


async def stable_members(admin: AIOKafkaAdminClient, group: str) -> int:
    """Members of ``group`` once it is stable (every member holds its partitions), else 0."""
    try:
        responses = await admin.describe_consumer_groups([group])
    except Exception:  # not there yet
        return 0
    for response in responses:
        for described in response.groups:
            if described[2] == "Stable":  # (error, group, state, protocol_type, protocol, members)
                return len(described[5])
    return 0


class BacklogTooSmall(Exception):
    """The workers read the whole backlog before the timed span could start."""


class WorkerExited(Exception):
    """A worker process ended during a run: its exit code and the last line it logged."""

    def __init__(self, code: int, log: Path) -> None:
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
        last = lines[-1].strip() if lines else "(it logged nothing)"
        super().__init__(f"a worker exited with code {code}: {last}")
        self.code = code


def check_running(workers: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    """Raise :class:`WorkerExited` for the first of ``workers`` (logging to ``logs``) that
    is no longer running."""
    for proc, log in zip(workers, logs, strict=True):
        if (code := proc.poll()) is not None:
            raise WorkerExited(code, log)


def worker_logs(tmp: Path, app_id: str, workers: int) -> list[Path]:
    """Where :func:`start_workers` has each worker log."""
    return [tmp / f"{app_id}-{w}.log" for w in range(workers)]


def start_workers(
    stack: ExitStack,
    bootstrap: str,
    prefix: str,
    app_id: str,
    *,
    tmp: Path,
    workers: int,
    partitions: int,
    window_s: float,
    grace_s: float,
) -> list[subprocess.Popen[bytes]]:
    """``workers`` worker processes of one group, stopped when ``stack`` closes."""
    return [
        stack.enter_context(
            worker_process(
                bootstrap,
                prefix=prefix,
                app_id=app_id,
                data_dir=tmp / f"{app_id}-{w}",
                window_s=window_s,
                grace_s=grace_s,
                partitions=partitions,
                log=log,
            )
        )
        for w, log in enumerate(worker_logs(tmp, app_id, workers))
    ]


async def throughput_run(
    bootstrap: str, n: int, hosts: int, tmp: Path, *, workers: int, partitions: int
) -> tuple[float, float]:
    prefix = f"b{uuid.uuid4().hex[:6]}."
    app_id = f"bench-{uuid.uuid4().hex[:6]}"
    await create_topics(bootstrap, prefix, partitions)
    samples = f"{prefix}samples"
    await produce_backlog(bootstrap, samples, n, hosts, partitions)
    ceiling = await bare_consume_rate(bootstrap, samples, n)
    updates = f"{app_id}-tenant-updates"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    probe = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await probe.start()
    try:
        with ExitStack() as procs:
            started = start_workers(
                procs,
                bootstrap,
                prefix,
                app_id,
                tmp=tmp,
                workers=workers,
                partitions=partitions,
                window_s=60.0,
                grace_s=10.0,
            )
            first_t = first_c = None
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                check_running(started, worker_logs(tmp, app_id, workers))
                c = await committed(admin, app_id, samples)
                if first_t is None and c > 0:
                    if c >= n:  # nothing left to time
                        who = "the workers" if workers > 1 else "the worker"
                        raise BacklogTooSmall(
                            f"{who} read all {n:,} snapshots before the timing could start: "
                            "pass a larger --snapshots"
                        )
                    if workers == 1 or await stable_members(admin, app_id) >= workers:
                        first_t, first_c = time.monotonic(), c
                if first_t is not None and c >= n:
                    ends = await end_total(probe, updates, partitions)
                    if await committed(admin, app_id, updates) >= ends > 0:
                        break
            else:
                raise RuntimeError("the workers did not finish the backlog in 600 s")
            assert first_t is not None and first_c is not None
            elapsed = time.monotonic() - first_t
            rate = (n - first_c) * 8 * PROCS_PER_GPU / elapsed
    finally:
        await probe.stop()
        await admin.close()
    return rate, ceiling


async def bare_consume_rate(bootstrap: str, topic: str, n: int) -> float:
    """Ceiling: a bare aiokafka consumer that reads and decodes the same snapshots."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
        max_partition_fetch_bytes=8 << 20,
    )
    got = samples = 0
    async with consumer:
        t0 = time.monotonic()
        while got < n:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for records in batch.values():
                for r in records:
                    samples += len(schema.decode(r.value, schema.HostSnapshot).procs)
                    got += 1
        elapsed = time.monotonic() - t0
    return samples / elapsed


async def latency_run(
    bootstrap: str, hosts: int, seconds: float, tmp: Path, *, workers: int, partitions: int
) -> list[float]:
    prefix = f"l{uuid.uuid4().hex[:6]}."
    app_id = f"lat-{uuid.uuid4().hex[:6]}"
    window_s, grace_s = 10.0, 2.0
    await create_topics(bootstrap, prefix, partitions)
    rng = random.Random(2)
    delays: list[float] = []
    with ExitStack() as procs:
        started = start_workers(
            procs, bootstrap, prefix, app_id, tmp=tmp, workers=workers,
            partitions=partitions, window_s=window_s, grace_s=grace_s,
        )  # fmt: skip
        await asyncio.sleep(12)  # the workers join their group
        check_running(started, worker_logs(tmp, app_id, workers))
        prod = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
        cons = AIOKafkaConsumer(
            f"{prefix}features",
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            group_id=None,
        )
        async with prod, cons:
            start = time.time()
            seq = 0
            while time.time() - start < seconds:
                tick = time.time()
                for h in range(hosts):
                    s = snapshot(rng, f"h{h}", seq, tick)
                    await prod.send(f"{prefix}samples", key=s.host.encode(), value=schema.encode(s))
                seq += 1
                check_running(started, worker_logs(tmp, app_id, workers))
                batch = await cons.getmany(timeout_ms=10)
                for records in batch.values():
                    for r in records:
                        w = schema.decode_window(r.value)
                        delays.append(r.timestamp / 1000 - w.window_end)
                await asyncio.sleep(max(0.0, 1.0 - (time.time() - tick)))
    return delays


def kafka_bootstrap(stack: ExitStack, tmp: Path) -> str:
    """KAFKA_BOOTSTRAP when set, else the project's local broker on free ports under
    ``tmp``, stopped when ``stack`` closes."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if bootstrap:
        return bootstrap
    broker = LocalBroker(
        BrokerSettings(
            port=_free_port(), controller_port=_free_port(), state_dir=tmp / "broker", heap="1g"
        )
    )
    broker.start()
    stack.callback(broker.stop)
    return broker.bootstrap


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--snapshots", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=40)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=1, help="worker processes, one group")
    ap.add_argument("--partitions", type=int, default=4, help="of samples and updates")
    ap.add_argument("--latency-s", type=float, default=60.0, help="0: no latency run")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of medians")
    ap.add_argument(
        "--procs-per-gpu", type=int, default=8, help="processes per GPU (8 GPUs per snapshot)"
    )
    args = ap.parse_args()
    at_least(
        ap, args, "--snapshots", "--hosts", "--runs", "--workers", "--partitions", "--procs-per-gpu"
    )
    if not 0 <= args.latency_s < math.inf:
        ap.exit(
            2,
            f"{ap.prog}: --latency-s must be >= 0 seconds (0: no latency run), "
            f"got {args.latency_s:g}\n",
        )
    try:
        measure(args)
    except BacklogTooSmall as exc:
        ap.exit(2, f"{ap.prog}: {exc}\n")
    except WorkerExited as exc:  # its own error, such as a bad DPROBE_WORKER_* setting
        ap.exit(2 if exc.code == 2 else 1, f"{ap.prog}: {exc}\n")
    except KafkaConnectionError:  # no broker at KAFKA_BOOTSTRAP: one line, exit 2
        where = os.environ.get("KAFKA_BOOTSTRAP", "the local broker")
        ap.exit(2, f"{ap.prog}: cannot reach Kafka at {where}: no broker answered\n")


def measure(args: argparse.Namespace) -> None:
    """The runs ``args`` ask for, printed as they end."""
    global PROCS_PER_GPU
    PROCS_PER_GPU = args.procs_per_gpu
    shape = {"workers": args.workers, "partitions": args.partitions}
    with tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        bootstrap = kafka_bootstrap(stack, tmp)
        rates, ceilings, ratios = [], [], []
        for i in range(args.runs):
            rate, ceiling = asyncio.run(
                throughput_run(bootstrap, args.snapshots, args.hosts, tmp, **shape)
            )
            rates.append(rate)
            ceilings.append(ceiling)
            ratios.append(rate / ceiling)
            print(
                f"run {i + 1}: {args.workers} worker(s) {rate:,.0f} samples/s, bare "
                f"consume+decode {ceiling:,.0f} samples/s, ratio {rate / ceiling:.2f}",
                flush=True,
            )
        print(
            f"throughput (median of {args.runs}, {args.workers} worker(s), "
            f"{args.partitions} partitions): {statistics.median(rates):,.0f} process "
            f"samples/s (range {min(rates):,.0f}-{max(rates):,.0f}); ceiling "
            f"{statistics.median(ceilings):,.0f} process samples/s; "
            f"ratio {statistics.median(ratios):.2f}; "
            f"{statistics.median(rates) / (8 * PROCS_PER_GPU):,.0f} snapshots/s of "
            f"{8 * PROCS_PER_GPU} process samples",
            flush=True,
        )
        delay_p99 = None
        if args.latency_s > 0:
            delays = asyncio.run(latency_run(bootstrap, 20, args.latency_s, tmp, **shape))
            if delays:
                delays.sort()
                delay_p99 = p99(delays)
                print(
                    f"window-close delay over {len(delays)} windows (grace 2 s): "
                    f"p50 {delays[len(delays) // 2]:.2f} s, p99 {delay_p99:.2f} s, "
                    f"max {delays[-1]:.2f} s"
                )
            else:
                print("no window closed during the latency run")
        if args.json:
            print(
                json.dumps(
                    {
                        "samples_per_s": statistics.median(rates),
                        "bare_samples_per_s": statistics.median(ceilings),
                        "ratio": statistics.median(ratios),
                        "p99_close_delay_s": delay_p99,
                        "workers": args.workers,
                        "runs": args.runs,
                        "partitions": args.partitions,
                        "samples_per_s_range": [min(rates), max(rates)],
                        "samples_per_snapshot": 8 * PROCS_PER_GPU,
                    }
                )
            )


if __name__ == "__main__":
    main()
