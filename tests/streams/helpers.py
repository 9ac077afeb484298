"""Shared pieces of the stream-worker tests: traffic, an independent reference, a worker
subprocess, and topic I/O."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from dprobe import schema
from dprobe.config import KafkaSettings, WorkerSettings
from dprobe.streams.app import WorkerApp, build_app

GB = 1_000_000_000
TENANTS = ("vc-a", "vc-b", "vc-c", "vc-d")


def make_snapshots(
    *, hosts: int = 3, ticks: int = 60, t0: float = 1_700_000_000.0, seed: int = 1
) -> list[schema.HostSnapshot]:
    """``hosts`` hosts x ``ticks`` 1-second snapshots, 4 GPUs each, processes of 4 tenants."""
    rng = random.Random(seed)
    out = []
    for tick in range(ticks):
        for h in range(hosts):
            host = f"host-{h}"
            gpus = []
            procs = []
            for i in range(4):
                uuid = f"GPU-{h}-{i}"
                util = rng.choice([5.0, 50.0, 95.0, rng.uniform(0, 100)])
                total = 80 * GB
                nprocs = rng.choice([0, 1, 1, 2])
                used = 0
                for _ in range(nprocs):
                    mem = rng.choice([1 * GB, 10 * GB, 30 * GB])
                    used += mem
                    procs.append(
                        schema.Proc(
                            pid=1000 + 10 * i + len(procs),
                            gpu=uuid,
                            tenant=rng.choice(TENANTS),
                            job=f"job-{h}-{i}",
                            sm_util=rng.choice([2.0, 40.0, 85.0]),
                            mem_util=rng.uniform(0, 100),
                            mem_used=mem,
                        )
                    )
                if rng.random() < 0.05:  # an exclusive-looking process (memory nearly full)
                    procs.append(
                        schema.Proc(
                            pid=5000 + i,
                            gpu=uuid,
                            tenant=rng.choice(TENANTS),
                            job="big",
                            sm_util=99.0,
                            mem_util=99.0,
                            mem_used=75 * GB,
                        )
                    )
                    used = max(used, 75 * GB)
                gpus.append(
                    schema.Gpu(
                        uuid=uuid,
                        index=i,
                        util=util,
                        mem_util=50.0,
                        mem_used=min(used, total),
                        mem_total=total,
                        power_w=300.0,
                    )
                )
            out.append(
                schema.HostSnapshot(
                    host=host,
                    ts=t0 + tick + 0.25 * h,
                    interval_s=1.0,
                    seq=tick,
                    gpus=tuple(gpus),
                    procs=tuple(procs),
                )
            )
    return out


def job_lifecycle(
    rng: random.Random, t: float, common: dict[str, Any], *, start_within: float, end_within: float
) -> list[schema.JobEvent]:
    """A random job's events from its submit at ``t``: started 7 times in 10 (within
    ``start_within`` s), finished or cancelled 6 times in 10 (0.1-``end_within`` s later)."""
    events = [schema.JobEvent(ts=t, event="submit", **common)]
    if rng.random() < 0.7:
        t += rng.uniform(0, start_within)
        events.append(schema.JobEvent(ts=t, event="start", **common))
    if rng.random() < 0.6:
        t += rng.uniform(0.1, end_within)
        events.append(schema.JobEvent(ts=t, event=rng.choice(["finish", "cancel"]), **common))
    return events


def closing_snapshots(
    snaps: list[schema.HostSnapshot], seconds: float = 30.0
) -> list[schema.HostSnapshot]:
    """Continue every host of ``snaps`` for ``seconds`` more 1-second ticks with every tenant
    present, so every watermark moves past the data's last window (real streams go on)."""
    last: dict[str, schema.HostSnapshot] = {}
    for s in snaps:
        last[s.host] = s
    out = []
    for k in range(1, int(seconds) + 1):
        for host, s in sorted(last.items()):
            gpu = schema.Gpu(
                uuid=f"GPU-{host}-c",
                index=0,
                util=1.0,
                mem_util=1.0,
                mem_used=4,
                mem_total=80 * GB,
                power_w=1.0,
            )
            procs = tuple(
                schema.Proc(
                    pid=9000 + j,
                    gpu=gpu.uuid,
                    tenant=t,
                    job="tail",
                    sm_util=0.0,
                    mem_util=0.0,
                    mem_used=1,
                )
                for j, t in enumerate(TENANTS)
            )
            out.append(
                schema.HostSnapshot(
                    host=host, ts=s.ts + k, interval_s=1.0, seq=s.seq + k, gpus=(gpu,), procs=procs
                )
            )
    return out


def reference_windows(
    snaps: list[schema.HostSnapshot], window_s: float
) -> dict[tuple[str, float], dict[str, Any]]:
    """TenantWindow fields recomputed directly from the snapshots, with plain loops.

    Written independently of dprobe.streams.state.window_agg: the paper's level rules are spelled
    out here again (L1: GPU util < 25 and memory < 3 GB; L3: GPU and SM util > 70;
    EX: memory >= 90 % of the GPU; weights 0.3/0.5/0.7/1.0).
    """
    seen: set[tuple[str, int]] = set()
    acc: dict[tuple[str, float], dict[str, Any]] = defaultdict(
        lambda: {
            "hosts": set(),
            "samples": 0,
            "inst": 0.0,
            "gpu_s": 0.0,
            "util_sum": 0.0,
            "L1": 0,
            "L2": 0,
            "L3": 0,
            "EX": 0,
            "weighted": 0.0,
        }
    )
    for s in snaps:
        if (s.host, s.seq) in seen:
            continue
        seen.add((s.host, s.seq))
        start = (s.ts // window_s) * window_s
        dev = {g.uuid: g for g in s.gpus}
        gpus_of: dict[str, set[str]] = defaultdict(set)
        for p in s.procs:
            g = dev[p.gpu]
            if p.mem_used >= 0.9 * g.mem_total:
                level, weight = "EX", 1.0
            elif g.util > 70 and p.sm_util > 70:
                level, weight = "L3", 0.7
            elif g.util < 25 and p.mem_used < 3e9:
                level, weight = "L1", 0.3
            else:
                level, weight = "L2", 0.5
            a = acc[(p.tenant, start)]
            a["hosts"].add(s.host)
            a["samples"] += 1
            a["inst"] += s.interval_s
            a["util_sum"] += p.sm_util
            a[level] += 1
            a["weighted"] += weight * s.interval_s
            gpus_of[p.tenant].add(p.gpu)
        for tenant, used in gpus_of.items():
            acc[(tenant, start)]["gpu_s"] += len(used) * s.interval_s
    return {
        key: {
            "hosts": len(a["hosts"]),
            "samples": a["samples"],
            "instances": a["inst"] / window_s,
            "gpus_busy": a["gpu_s"] / window_s,
            "util_sum": a["util_sum"],
            "level_counts": {k: a[k] for k in ("L1", "L2", "L3", "EX")},
            "effective_demand_gpus": a["weighted"] / window_s,
        }
        for key, a in acc.items()
    }


def assert_window_matches(
    got: schema.TenantWindow, ref: dict[str, Any], window_s: float, *, check_lost: bool = True
) -> None:
    import pytest

    assert got.window_end - got.window_start == window_s
    assert got.hosts == ref["hosts"]
    assert got.samples == ref["samples"]
    assert {k: getattr(got.level_counts, k) for k in ("L1", "L2", "L3", "EX")} == ref[
        "level_counts"
    ]
    for f in ("instances", "gpus_busy", "util_sum", "effective_demand_gpus"):
        assert getattr(got, f) == pytest.approx(ref[f], rel=1e-9, abs=1e-9), f
    if check_lost:
        assert got.lost_snapshots == 0


Broker = str | KafkaSettings  # a bootstrap address, or client settings (SASL, TLS)


def client_kw(broker: Broker) -> dict[str, Any]:
    """aiokafka keyword arguments for ``broker``."""
    if isinstance(broker, KafkaSettings):
        return broker.client_kwargs()
    return {"bootstrap_servers": broker}


def kafka_env(broker: Broker) -> dict[str, str]:
    """The ``DPROBE_KAFKA_*`` environment of a dprobe process talking to ``broker``."""
    if not isinstance(broker, KafkaSettings):
        return {"DPROBE_KAFKA_BOOTSTRAP": broker}
    env = {
        "DPROBE_KAFKA_BOOTSTRAP": broker.bootstrap,
        "DPROBE_KAFKA_SECURITY_PROTOCOL": broker.security_protocol,
    }
    if broker.sasl_mechanism:
        env["DPROBE_KAFKA_SASL_MECHANISM"] = broker.sasl_mechanism
        env["DPROBE_KAFKA_SASL_USERNAME"] = broker.sasl_username or ""
        env["DPROBE_KAFKA_SASL_PASSWORD"] = (
            broker.sasl_password.get() if broker.sasl_password else ""
        )
    return env


async def create_worker_topics(bootstrap: Broker, prefix: str, partitions: int = 4) -> None:
    """The worker's external topics under ``prefix``, as a deployment would create them."""
    admin = AIOKafkaAdminClient(**client_kw(bootstrap))
    await admin.start()
    try:
        names = ("samples", "jobs", "features", "deadletter", "scaling-events")
        await admin.create_topics([NewTopic(f"{prefix}{t}", partitions, 1) for t in names])
    finally:
        await admin.close()


async def produce(
    bootstrap: Broker, topic: str, records: Sequence[tuple[bytes | None, bytes | None]]
) -> None:
    producer = AIOKafkaProducer(
        **client_kw(bootstrap), enable_idempotence=True, acks="all", linger_ms=5
    )
    async with producer:
        for key, value in records:
            await producer.send(topic, key=key, value=value)
        await producer.flush()


def snapshot_records(snaps: list[schema.HostSnapshot]) -> list[tuple[bytes | None, bytes]]:
    return [(s.host.encode(), schema.encode(s)) for s in snaps]


def _reader(bootstrap: Broker, isolation_level: str, *topics: str) -> AIOKafkaConsumer:
    """A consumer outside any group that starts at the beginning of what it reads."""
    return AIOKafkaConsumer(
        *topics,
        **client_kw(bootstrap),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
        isolation_level=isolation_level,
    )


async def consume(
    bootstrap: Broker,
    topic: str,
    *,
    until: int,
    timeout_s: float = 120.0,
    isolation_level: str = "read_uncommitted",
) -> list[bytes]:
    """Read ``topic`` from the start until ``until`` records arrived or the time is up."""
    consumer = _reader(bootstrap, isolation_level, topic)
    out: list[bytes] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with consumer:
        while len(out) < until and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                out += [r.value for r in records]
    return out


async def consume_all(
    bootstrap: Broker,
    topic: str,
    *,
    timeout_s: float = 60.0,
    isolation_level: str = "read_uncommitted",
) -> list[bytes]:
    """Every record value of ``topic`` from the start up to its end offsets when called: a
    whole read, however long it takes on a busy machine (up to ``timeout_s``, then an
    error)."""
    records = await consume_all_records(
        bootstrap, topic, timeout_s=timeout_s, isolation_level=isolation_level
    )
    return [value for _, value in records]


async def consume_all_records(
    bootstrap: Broker,
    topic: str,
    *,
    timeout_s: float = 60.0,
    isolation_level: str = "read_uncommitted",
) -> list[tuple[bytes | None, bytes]]:
    """:func:`consume_all` with each record's key: ``(key, value)`` in log order per
    partition."""
    consumer = _reader(bootstrap, isolation_level)
    out: list[tuple[bytes | None, bytes]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    admin = AIOKafkaAdminClient(**client_kw(bootstrap))
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    parts = [TopicPartition(topic, p["partition"]) for p in described["partitions"]]
    assert parts, f"no topic {topic}"
    async with consumer:
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            assert loop.time() < deadline, f"{topic} not read to its end in {timeout_s} s"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out += [(r.key, r.value) for r in records]
    return out


@contextlib.contextmanager
def bare_consumer(consumer_class: type) -> Iterator[Any]:
    """The consumer, of class ``consumer_class``, of a bare faust app made in the running
    loop and never started (no broker needed); its consumer thread's own event loop is
    closed afterwards."""
    app = faust.App("consumer-test", broker="kafka://127.0.0.1:1", web_enabled=False)
    app.transport.Consumer = consumer_class
    try:
        yield app.consumer
    finally:
        app.consumer._thread.thread_loop.close()


@contextlib.contextmanager
def unstarted_worker_app(settings: WorkerSettings) -> Iterator[WorkerApp]:
    """The worker's faust app (``build_app``), never started, so no broker is needed; the
    event loop its consumer thread made is closed afterwards."""
    built = build_app(settings)
    try:
        yield built
    finally:
        built.app.consumer._thread.thread_loop.close()


@contextlib.contextmanager
def worker_process(
    bootstrap: Broker,
    *,
    prefix: str,
    app_id: str,
    data_dir: Path,
    window_s: float = 10.0,
    grace_s: float = 2.0,
    log: Path | None = None,
    partitions: int = 4,
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``dprobe worker`` subprocess; stopped with SIGTERM (SIGKILL after 30 s).

    Its /metrics listens on an ephemeral port unless ``env`` sets DPROBE_WORKER_METRICS_PORT.
    """
    env = {
        **os.environ,
        **kafka_env(bootstrap),
        "DPROBE_KAFKA_TOPIC_PREFIX": prefix,
        "DPROBE_WORKER_METRICS_PORT": "0",
        **(env or {}),
    }
    cmd = [
        sys.executable,
        "-m",
        "dprobe.cli",
        "--bootstrap",
        bootstrap.bootstrap if isinstance(bootstrap, KafkaSettings) else bootstrap,
        "--log-level",
        os.environ.get("DPROBE_TEST_WORKER_LOG_LEVEL", "WARNING"),
        "worker",
        "--app-id",
        app_id,
        "--window",
        str(window_s),
        "--grace",
        str(grace_s),
        "--data-dir",
        str(data_dir),
        "--partitions",
        str(partitions),
    ]
    out = open(log or os.devnull, "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        out.close()
