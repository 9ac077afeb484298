"""Planning fails over through Kafka: when the worker that owns the planning partition is
SIGKILLed mid-run, or leaves while a third worker joins, another worker takes planning
over from the ``planning`` table's changelog, and the scaling events of the whole run
equal those of an uninterrupted single worker: the same event ids, none missing, none
different after dedupe by id, the same quotas."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from dprobe import schema
from tests.conftest import _free_port
from tests.streams.helpers import (
    closing_snapshots,
    create_worker_topics,
    produce,
    snapshot_records,
    worker_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WINDOW_S = 10.0
T0 = 1_700_000_000.0
GB = 1_000_000_000
TENANTS = ("vc-a", "vc-b", "vc-c", "vc-d")
# GPUs each tenant runs in window m (pattern[m % 6]); at most the 64 GPUs of 8 hosts
PATTERNS = ((8, 16, 24, 32, 24, 16), (32, 24, 16, 8, 16, 24), (8, 8, 16, 16, 8, 8), (8,) * 6)
WINDOWS = 18


def _snapshots(windows: int = WINDOWS) -> list[schema.HostSnapshot]:
    """8 hosts x 8 GPUs, one whole-GPU process per busy GPU; each tenant's GPUs follow
    its pattern, one step per window, so plans move quota back and forth."""
    out = []
    for tick in range(int(windows * WINDOW_S)):
        m = tick // int(WINDOW_S)
        owners = [t for t, p in zip(TENANTS, PATTERNS, strict=True) for _ in range(p[m % 6])]
        for h in range(8):
            gpus, procs = [], []
            for i in range(8):
                g = h * 8 + i
                gpu = f"GPU-{h}-{i}"
                busy = g < len(owners)
                gpus.append(
                    schema.Gpu(
                        uuid=gpu, index=i, util=90.0 if busy else 0.0, mem_util=50.0,
                        mem_used=40 * GB if busy else 0, mem_total=80 * GB, power_w=300.0,
                    )
                )  # fmt: skip
                if busy:
                    procs.append(
                        schema.Proc(
                            pid=1000 + i, gpu=gpu, tenant=owners[g], job=f"{owners[g]}-{h}-{i}",
                            sm_util=90.0, mem_util=50.0, mem_used=40 * GB,
                        )
                    )  # fmt: skip
            out.append(
                schema.HostSnapshot(
                    host=f"host-{h}", ts=T0 + tick + 0.1 * h, interval_s=1.0, seq=tick,
                    gpus=tuple(gpus), procs=tuple(procs),
                )
            )  # fmt: skip
    return out


async def _events(bootstrap: str, prefix: str, app_id: str, *, timeout_s: float) -> list:
    """Every scaling event under ``prefix`` once the group has planned everything: a
    window past the data's last one has been emitted (so every window of the data and its
    partition's progress went to the planning topic), and the group's committed offset on
    the planning topic has reached that topic's end (the events of every record it
    planned were delivered before its offset was committed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    past_data = T0 + (WINDOWS + 1) * WINDOW_S
    planning = TopicPartition(f"{app_id}-planning", 0)
    consumer = AIOKafkaConsumer(
        f"{prefix}features", bootstrap_servers=bootstrap, auto_offset_reset="earliest"
    )
    async with consumer:
        past: set[str] = set()
        while past != set(TENANTS):  # each tenant's window partition is past the data
            assert loop.time() < deadline, "the data's windows were not all emitted in time"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                windows = [schema.decode_window(r.value) for r in records]
                past |= {w.tenant for w in windows if w.window_end >= past_data}
        ends: list[int] = []
        while len(ends) < 3 or len(set(ends[-3:])) > 1:  # planned to an end that stays
            assert loop.time() < deadline, "the planning topic was not planned to its end"
            end = (await consumer.end_offsets([planning]))[planning]
            if await _planning_committed(bootstrap, app_id) >= end > 0:
                ends.append(end)
            await asyncio.sleep(1.0)
    return await _read_all(bootstrap, f"{prefix}scaling-events")


async def _read_all(bootstrap: str, topic: str) -> list[schema.ScalingEvent]:
    """Every record of ``topic`` up to its end now, decoded as scaling events."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    parts = [TopicPartition(topic, p["partition"]) for p in described["partitions"]]
    assert parts, f"no topic {topic}"
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    out: list[schema.ScalingEvent] = []
    async with reader:
        reader.assign(parts)
        await reader.seek_to_beginning(*parts)
        ends = await reader.end_offsets(parts)
        while [tp for tp, end in ends.items() if await reader.position(tp) < end]:
            for records in (await reader.getmany(timeout_ms=500)).values():
                out += [schema.decode_scaling_event(r.value) for r in records]
    return out


def _by_id(events: list) -> dict[str, tuple[str, float, float]]:
    """Events of the data's windows (the closing tail left out), deduped by id; a repeat
    must be identical."""
    out: dict[str, tuple[str, float, float]] = {}
    for e in events:
        if e.window_end > T0 + WINDOWS * WINDOW_S:
            continue
        row = (e.tenant, e.window_end, e.target_quota_gpus)
        assert out.setdefault(e.event_id, row) == row, f"event {e.event_id} differs"
    return out


def _planned(port: int) -> float:
    """Scaling events a worker has produced (only the planning partition's owner does)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("dprobe_scaling_events_total{")
    )


async def _owner(ports: list[int], *, timeout_s: float = 150.0) -> int:
    """Index of the worker that plans (it has produced events)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        for i, port in enumerate(ports):
            try:
                if _planned(port) > 0:
                    return i
            except OSError:
                pass
        await asyncio.sleep(1.0)
    raise AssertionError("no worker planned")


async def _planning_committed(bootstrap: str, app_id: str) -> int:
    """The offset the group has committed on its planning topic (-1: none yet)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(app_id)
    finally:
        await admin.close()
    return max(
        (o.offset for tp, o in offsets.items() if tp.topic == f"{app_id}-planning"), default=-1
    )


async def _wait_committed(bootstrap: str, app_id: str, *, at_least: int = 1) -> int:
    """Wait until the group has committed planning records (so a new owner cannot simply
    read the planning topic again from its start)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60.0
    while loop.time() < deadline:
        committed = await _planning_committed(bootstrap, app_id)
        if committed >= at_least:
            return committed
        await asyncio.sleep(0.5)
    raise AssertionError("the planning offsets were never committed")


async def _members(bootstrap: str, group: str, n: int, *, timeout_s: float = 120.0) -> None:
    """Wait until ``group`` is stable with ``n`` members."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            [described] = await admin.describe_consumer_groups([group])
        finally:
            await admin.close()
        _, _, state, _, _, members = described.groups[0][:6]
        if state == "Stable" and len(members) == n:
            return
        await asyncio.sleep(1.0)
    raise AssertionError(f"group {group} never had {n} stable members")


async def _planned_more(workers: list, before: float, *, timeout_s: float = 120.0) -> None:
    """Wait until the workers together have produced more events than ``before``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        total = 0.0
        for _, port in workers:
            with suppress(OSError):
                total += _planned(port)
        if total > before:
            return
        await asyncio.sleep(1.0)
    raise AssertionError("no plan after the rebalance")


def _prefix() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"f{tag}.", f"planner-{tag}"


def _workers(
    stack: ExitStack, bootstrap: str, tmp_path: Path, prefix: str, app_id: str, n: int
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for _ in range(n):
        port = _free_port()
        name = f"w{port}"
        proc = stack.enter_context(
            worker_process(
                bootstrap, prefix=prefix, app_id=app_id, data_dir=tmp_path / name,
                window_s=WINDOW_S, log=tmp_path / f"{name}.log",
                env={"DPROBE_WORKER_METRICS_PORT": str(port)},
            )
        )  # fmt: skip
        yield proc, port


async def _reference(bootstrap: str, tmp_path: Path, snaps: list) -> dict:
    prefix, app_id = _prefix()
    await create_worker_topics(bootstrap, prefix)
    await produce(bootstrap, f"{prefix}samples", snapshot_records(snaps + closing_snapshots(snaps)))
    with ExitStack() as stack:
        [(proc, _)] = list(_workers(stack, bootstrap, tmp_path / "ref", prefix, app_id, 1))
        events = await _events(bootstrap, prefix, app_id, timeout_s=240)
        assert proc.poll() is None
    ref = _by_id(events)
    assert len(ref) >= 10 and len({e[1] for e in ref.values()}) >= 5, "too few plans to compare"
    return ref


async def test_sigkill_of_the_planning_owner_changes_no_scaling_event(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    snaps = _snapshots()
    ref = await _reference(kafka_bootstrap, tmp_path, snaps)

    prefix, app_id = _prefix()
    await create_worker_topics(kafka_bootstrap, prefix)
    third = len(snaps) // 3
    samples = f"{prefix}samples"
    await produce(kafka_bootstrap, samples, snapshot_records(snaps[:third]))
    with ExitStack() as stack:
        workers = list(_workers(stack, kafka_bootstrap, tmp_path, prefix, app_id, 2))
        owner = await _owner([port for _, port in workers])
        committed = await _wait_committed(kafka_bootstrap, app_id)
        # traffic keeps flowing while the owner dies
        await produce(kafka_bootstrap, samples, snapshot_records(snaps[third : 2 * third]))
        workers[owner][0].send_signal(signal.SIGKILL)
        workers[owner][0].wait()
        await produce(
            kafka_bootstrap,
            samples,
            snapshot_records(snaps[2 * third :] + closing_snapshots(snaps)),
        )
        events = await _events(kafka_bootstrap, prefix, app_id, timeout_s=400)
        survivor = workers[1 - owner]
        assert survivor[0].poll() is None
        # the survivor went on from the committed offset, not from the topic's start
        assert await _planning_committed(kafka_bootstrap, app_id) > committed
        assert _planned(survivor[1]) > 0, "the survivor never planned"
    got = _by_id(events)
    assert sorted(got) == sorted(ref)  # same ids: none missing, none extra
    assert got == ref  # same tenants, ends and quotas


async def test_a_graceful_rebalance_changes_no_scaling_event(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    snaps = _snapshots()
    ref = await _reference(kafka_bootstrap, tmp_path, snaps)

    prefix, app_id = _prefix()
    await create_worker_topics(kafka_bootstrap, prefix)
    third = len(snaps) // 3
    samples = f"{prefix}samples"
    await produce(kafka_bootstrap, samples, snapshot_records(snaps[:third]))
    with ExitStack() as stack:
        workers = list(_workers(stack, kafka_bootstrap, tmp_path, prefix, app_id, 2))
        owner = await _owner([port for _, port in workers])
        await _wait_committed(kafka_bootstrap, app_id)
        # a third worker joins: every partition is revoked and assigned again, and the
        # planning partition may stay where it was; plans go on across that rebalance
        workers += list(_workers(stack, kafka_bootstrap, tmp_path, prefix, app_id, 1))
        await _members(kafka_bootstrap, app_id, 3)
        before = sum(_planned(port) for _, port in workers[:2])
        await produce(kafka_bootstrap, samples, snapshot_records(snaps[third : 2 * third]))
        await _planned_more(workers, before)
        # then the owner leaves cleanly: planning moves for sure
        workers[owner][0].send_signal(signal.SIGTERM)
        assert workers[owner][0].wait(timeout=150) == 0  # a stop waits for the rebalance
        await produce(
            kafka_bootstrap,
            samples,
            snapshot_records(snaps[2 * third :] + closing_snapshots(snaps)),
        )
        events = await _events(kafka_bootstrap, prefix, app_id, timeout_s=400)
        rest = [w for i, w in enumerate(workers) if i != owner]
        assert all(proc.poll() is None for proc, _ in rest)
        assert any(_planned(port) > 0 for _, port in rest), "no other worker planned"
    got = _by_id(events)
    assert sorted(got) == sorted(ref)
    assert got == ref
