"""On a real broker: what the scheduler reports on dprobe.cluster (published with
``dprobe cluster publish``) is what the worker plans from, whatever ``capacity_gpus`` says,
and a report that is not valid goes to the dead-letter topic with its reason (a tombstone,
which retires a source, does not)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from dprobe import schema
from tests.conftest import _free_port
from tests.streams.helpers import (
    GB,
    consume,
    create_worker_topics,
    produce,
    snapshot_records,
    worker_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = 1_700_000_000.0
WINDOW_S = 60.0
TICK_S = 10.0
RUNNING = {"vc-a": 8, "vc-b": 16}  # GPUs each tenant runs, on hosts of its own


def _snapshots(ticks: int) -> list[schema.HostSnapshot]:
    out = []
    hosts = [(t, i) for t, n in sorted(RUNNING.items()) for i in range(n // 8)]
    for k in range(ticks):
        for h, (tenant, i) in enumerate(hosts):
            gpus = tuple(
                schema.Gpu(
                    uuid=f"GPU-{h}-{g}",
                    index=g,
                    util=90.0,
                    mem_util=50.0,
                    mem_used=40 * GB,
                    mem_total=80 * GB,
                    power_w=300.0,
                )
                for g in range(8)
            )
            procs = tuple(
                schema.Proc(
                    pid=100 + g,
                    gpu=f"GPU-{h}-{g}",
                    tenant=tenant,
                    job=f"{tenant}-{i}",
                    sm_util=90.0,
                    mem_util=50.0,
                    mem_used=40 * GB,
                )
                for g in range(8)
            )
            out.append(
                schema.HostSnapshot(
                    host=f"{tenant}-host-{i}",
                    ts=T0 + k * TICK_S,
                    interval_s=TICK_S,
                    seq=k,
                    gpus=gpus,
                    procs=procs,
                )
            )
    return out


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


async def _first_plan(bootstrap: str, topic: str, timeout_s: float = 150.0) -> list:
    """The events of the first plan (lowest ``plan_seq``) once all of them have arrived:
    a plan's events are spread over the topic's partitions, so the first records read can
    belong to different plans."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        raws = await consume(bootstrap, topic, until=10**9, timeout_s=3)
        events = [schema.decode_scaling_event(r) for r in raws]
        if events:
            first = min(events, key=lambda e: e.plan_seq)
            plan = {e.event_id: e for e in events if e.plan_id == first.plan_id}
            if len(plan) >= first.plan_size:
                return sorted(plan.values(), key=lambda e: e.tenant)
    return []


async def _until_reported(port: int, timeout_s: float = 120.0) -> None:
    """Wait until the worker's planner has taken the cluster report."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        with contextlib.suppress(OSError):
            if "dprobe_cluster_reports_total 1.0" in _scrape(port):
                return
        await asyncio.sleep(0.5)
    raise AssertionError("the worker never took the cluster report")


def _publish(bootstrap: str, prefix: str, *args: str) -> None:
    env = {**os.environ, "DPROBE_KAFKA_TOPIC_PREFIX": prefix}
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", bootstrap, "cluster", "publish"]
    done = subprocess.run(
        [*cmd, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


async def test_the_worker_plans_from_the_reported_capacity_and_quotas(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"c{tag}.", f"cluster-{tag}"
    await create_worker_topics(kafka_bootstrap, prefix)
    # the scheduler's truth: 48 GPUs, vc-a holds 40 and vc-b 8 (the setting says 64, and an
    # even split would have given 32 each)
    _publish(
        kafka_bootstrap,
        prefix,
        "--capacity", "48", "--quota", "vc-a=40", "--quota", "vc-b=8", "--complete",
        "--source", "kueue",
    )  # fmt: skip
    # a retired source's tombstone, before an invalid report: only the latter is a dead letter
    async with AIOKafkaProducer(bootstrap_servers=kafka_bootstrap) as producer:
        await producer.send_and_wait(f"{prefix}cluster", None, key=b"retired-adapter")
    await produce(kafka_bootstrap, f"{prefix}cluster", [(b"bad", b'{"v":1,"ts":1}')])
    port = _free_port()
    env = {"DPROBE_WORKER_CAPACITY_GPUS": "64", "DPROBE_WORKER_METRICS_PORT": str(port)}
    with worker_process(
        kafka_bootstrap,
        prefix=prefix,
        app_id=app_id,
        data_dir=tmp_path / "w",
        window_s=WINDOW_S,
        grace_s=5.0,
        log=tmp_path / "worker.log",
        env=env,
    ) as proc:
        # the report reaches the planner through its own topic: the data comes after it,
        # as in a running cluster (a plan made before the first report uses the settings)
        await _until_reported(port)
        await produce(kafka_bootstrap, f"{prefix}samples", snapshot_records(_snapshots(6 * 8)))
        plan = await _first_plan(kafka_bootstrap, f"{prefix}scaling-events")
        dead = await consume(kafka_bootstrap, f"{prefix}deadletter", until=1, timeout_s=30)
        metrics = _scrape(port)
        assert proc.poll() is None
    log = (tmp_path / "worker.log").read_text()
    assert plan, f"no whole plan; worker log:\n{log[-3000:]}"
    assert len(plan) == plan[0].plan_size == 2
    moves = {e.tenant: (e.current_quota_gpus, e.target_quota_gpus) for e in plan}
    # planned from the report: vc-b's 16 running GPUs need a second node, lent by vc-a
    assert moves == {"vc-a": (40.0, 32.0), "vc-b": (8.0, 16.0)}
    assert "dprobe_capacity_gpus 48.0" in metrics
    assert "dprobe_cluster_reports_total 1.0" in metrics
    letters = [schema.decode(r, schema.DeadLetter) for r in dead]
    assert [(d.source_topic, d.reason) for d in letters] == [(f"{prefix}cluster", "invalid_field")]
    assert "source" in letters[0].error
