"""Stream worker benchmark on a real broker: process samples/s and window-close delay.

Prints, for one worker process (``dprobe worker``) on a local single-node Kafka:

1. throughput: a backlog of snapshots (8 GPUs x 8 processes = 64 process samples each)
   is produced first; the worker then ingests and windows it. Rate = process samples
   committed per second between the worker's first commit and the moment every snapshot
   is committed and the internal updates topic is drained. Measured in the same run: a
   bare aiokafka consume-and-decode loop over the same topic (the ceiling), and the ratio.
2. latency: live traffic paced at 1 Hz per host with event time = wall time; for each
   TenantWindow, delay = its Kafka record timestamp - window_end. Target p99 <= grace + 2 s.

    python benchmarks/worker_throughput.py [--snapshots 20000] [--runs 3] [--latency-s 60]

Uses KAFKA_BOOTSTRAP when set, else starts the project's local broker on free ports.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import GroupCoordinatorNotAvailableError
from aiokafka.structs import TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dprobe import schema
from dprobe.broker import LocalBroker
from dprobe.config import BrokerSettings
from tests.conftest import _free_port
from tests.streams.helpers import worker_process

GB = 1_000_000_000
TENANTS = [f"vc-{i}" for i in range(8)]
PARTITIONS = 4


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
        for j in range(8):
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


async def create_topics(bootstrap: str, prefix: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(f"{prefix}{t}", PARTITIONS, 1)
                for t in ("samples", "jobs", "features", "deadletter", "scaling-events")
            ]
        )
    finally:
        await admin.close()


async def produce_backlog(bootstrap: str, topic: str, n: int, hosts: int) -> None:
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
        for host, value in values:
            await prod.send(topic, key=host.encode(), value=value)
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


async def throughput_run(bootstrap: str, n: int, hosts: int, tmp: Path) -> tuple[float, float]:
    prefix = f"b{uuid.uuid4().hex[:6]}."
    app_id = f"bench-{uuid.uuid4().hex[:6]}"
    await create_topics(bootstrap, prefix)
    samples = f"{prefix}samples"
    await produce_backlog(bootstrap, samples, n, hosts)
    ceiling = await bare_consume_rate(bootstrap, samples, n)
    updates = f"{app_id}-tenant-updates"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    probe = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await probe.start()
    try:
        with worker_process(
            bootstrap,
            prefix=prefix,
            app_id=app_id,
            data_dir=tmp / app_id,
            window_s=60.0,
            grace_s=10.0,
            partitions=PARTITIONS,
            log=tmp / f"{app_id}.log",
        ) as proc:
            first_t = first_c = None
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                if proc.poll() is not None:
                    raise RuntimeError(f"worker exited; see {tmp / (app_id + '.log')}")
                c = await committed(admin, app_id, samples)
                if first_t is None and c > 0:
                    first_t, first_c = time.monotonic(), c
                if c >= n:
                    ends = await end_total(probe, updates, PARTITIONS)
                    if await committed(admin, app_id, updates) >= ends > 0:
                        break
            else:
                raise RuntimeError("worker did not finish the backlog in 600 s")
            assert first_t is not None and first_c is not None
            elapsed = time.monotonic() - first_t
            rate = (n - first_c) * 64 / elapsed
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


async def latency_run(bootstrap: str, hosts: int, seconds: float, tmp: Path) -> list[float]:
    prefix = f"l{uuid.uuid4().hex[:6]}."
    app_id = f"lat-{uuid.uuid4().hex[:6]}"
    window_s, grace_s = 10.0, 2.0
    await create_topics(bootstrap, prefix)
    rng = random.Random(2)
    delays: list[float] = []
    with worker_process(
        bootstrap,
        prefix=prefix,
        app_id=app_id,
        data_dir=tmp / app_id,
        window_s=window_s,
        grace_s=grace_s,
        partitions=PARTITIONS,
        log=tmp / f"{app_id}.log",
    ):
        await asyncio.sleep(12)  # the worker joins its group
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


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--snapshots", type=int, default=20000)
    ap.add_argument("--hosts", type=int, default=40)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--latency-s", type=float, default=60.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        bootstrap = kafka_bootstrap(stack, tmp)
        rates, ceilings = [], []
        for i in range(args.runs):
            rate, ceiling = asyncio.run(throughput_run(bootstrap, args.snapshots, args.hosts, tmp))
            rates.append(rate)
            ceilings.append(ceiling)
            print(
                f"run {i + 1}: worker {rate:,.0f} samples/s, bare consume+decode "
                f"{ceiling:,.0f} samples/s, ratio {rate / ceiling:.2f}",
                flush=True,
            )
        print(
            f"throughput (median of {args.runs}): worker {statistics.median(rates):,.0f} "
            f"process samples/s; ceiling {statistics.median(ceilings):,.0f}; ratio "
            f"{statistics.median(r / c for r, c in zip(rates, ceilings, strict=True)):.2f}"
        )
        delays = asyncio.run(latency_run(bootstrap, 20, args.latency_s, tmp))
        delays.sort()
        if delays:
            p50 = delays[len(delays) // 2]
            p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
            print(
                f"window-close delay over {len(delays)} windows (grace 2 s): "
                f"p50 {p50:.2f} s, p99 {p99:.2f} s, max {delays[-1]:.2f} s"
            )
        else:
            print("no window closed during the latency run")


if __name__ == "__main__":
    main()
