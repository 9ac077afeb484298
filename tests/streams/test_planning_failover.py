"""Planning fails over through Kafka: when the worker that owns the planning partition is
SIGKILLed mid-run, stalls until the group drops it and then wakes up, or leaves while a
third worker joins, another worker takes planning over from the ``planning`` table's
changelog, and the scaling events of the whole run equal those of an uninterrupted single
worker: the same event ids, none missing, none different after dedupe by id, the same
quotas."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import TypeVar

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from dprobe import schema
from dprobe.streams import codec
from dprobe.streams.ranked_table import advancing, offset_rank
from tests.conftest import _free_port
from tests.streams.helpers import (
    closing_snapshots,
    consume_all,
    consume_all_records,
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
# worker.session_timeout_s: the group drops a member that sent no heartbeat for this
# long. The default is faust's 60 s; 10 s (Kafka's own default until 3.0) keeps a stall
# short
SESSION_TIMEOUT_S = 10
# the exit status of a worker whose outputs were not delivered (streams/app.py)
EXIT_UNDELIVERED = 70
T = TypeVar("T")


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
    return [schema.decode_scaling_event(raw) for raw in await consume_all(bootstrap, topic)]


async def _hosts_restore_to_their_newest_state(bootstrap: str, app_id: str) -> None:
    """A restore of the host-state table from its changelog, at any point of it, gives each
    host the newest state written for it so far, even where a stalled former owner wrote
    an older one after it (seen here as ``..., 176, 62, 209``; whether it happens in a run
    depends on timing)."""
    log = await consume_all_records(bootstrap, f"{app_id}-hosts-changelog")
    assert log, "no host state was written"
    records = [SimpleNamespace(key=k, value=v) for k, v in log]
    newest: dict[bytes | None, int] = {}
    for n, (key, value) in enumerate(log, start=1):
        newest[key] = max(newest.get(key, -1), codec.loads(value)["seq"])
        restored = {e.key: e.value for e in advancing(records[:n], {}.get, offset_rank)}
        assert {k: codec.loads(v)["seq"] for k, v in restored.items()} == newest, n


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


async def _until(check: Callable[[], Awaitable[T | None]], failure: str, timeout_s: float) -> T:
    """Poll ``check`` every half second until it returns something other than ``None``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        found = await check()
        if found is not None:
            return found
        await asyncio.sleep(0.5)
    raise AssertionError(failure)


def _planned_or_zero(port: int) -> float:
    """:func:`_planned`, 0 while the worker's /metrics does not answer yet."""
    try:
        return _planned(port)
    except OSError:
        return 0.0


async def _owner(ports: list[int]) -> int:
    """Index of the worker that plans (it has produced events)."""

    async def planner() -> int | None:
        return next((i for i, port in enumerate(ports) if _planned_or_zero(port) > 0), None)

    return await _until(planner, "no worker planned", 150.0)


async def _planning_committed(bootstrap: str, app_id: str) -> int:
    """The offset the group has committed on its planning topic (-1: none yet)."""
    async with _admin(bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(app_id)
    return max(
        (o.offset for tp, o in offsets.items() if tp.topic == f"{app_id}-planning"), default=-1
    )


async def _first_window_offset(bootstrap: str, app_id: str) -> int | None:
    """The offset of the planning topic's first tenant window (None: none yet). The
    records before it can be the window-length mark the first worker writes when it
    starts the group (streams/group_window.py), which plans nothing."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(f"{app_id}-planning", 0)
    async with consumer:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for record in batch.get(tp, []):
                if record.value is not None and record.value[:1] == codec.PLAN_WINDOW:
                    return record.offset
    return None


async def _wait_committed(bootstrap: str, app_id: str) -> int:
    """Wait until the group has committed planning records past the first tenant window
    (so a new owner cannot simply read the planning topic again from its start, nor
    from just after the window-length mark); the committed offset."""

    async def committed() -> int | None:
        first = await _first_window_offset(bootstrap, app_id)
        offset = await _planning_committed(bootstrap, app_id)
        return offset if first is not None and offset > first else None

    return await _until(committed, "the planning offsets were never committed", 60.0)


async def _members(bootstrap: str, group: str, n: int) -> None:
    """Wait until ``group`` is stable with ``n`` members."""

    async def stable() -> bool | None:
        async with _admin(bootstrap) as admin:
            [described] = await admin.describe_consumer_groups([group])
        _, _, state, _, _, members = described.groups[0][:6]
        return True if state == "Stable" and len(members) == n else None

    await _until(stable, f"group {group} never had {n} stable members", 120.0)


async def _planned_more(workers: list, before: float, timeout_s: float = 120.0) -> None:
    """Wait until the workers together have produced more events than ``before``."""

    async def more() -> bool | None:
        return True if sum(_planned_or_zero(port) for _, port in workers) > before else None

    await _until(more, "no plan after the rebalance", timeout_s)


@contextlib.asynccontextmanager
async def _admin(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


def _prefix() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"f{tag}.", f"planner-{tag}"


def _workers(
    stack: ExitStack,
    bootstrap: str,
    tmp_path: Path,
    prefix: str,
    app_id: str,
    n: int,
    env: dict[str, str] | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``n`` workers of group ``app_id`` (``env`` added to their environment), each with
    its /metrics port; each logs to ``tmp_path / f"w{port}.log"``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for _ in range(n):
        port = _free_port()
        name = f"w{port}"
        proc = stack.enter_context(
            worker_process(
                bootstrap, prefix=prefix, app_id=app_id, data_dir=tmp_path / name,
                window_s=WINDOW_S, log=tmp_path / f"{name}.log",
                env={**(env or {}), "DPROBE_WORKER_METRICS_PORT": str(port)},
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


async def _first_third(bootstrap: str, tmp_path: Path) -> tuple[list, dict, str, str]:
    """The data, the reference run's events, and the prefix and group of a second run
    whose samples topic holds the first third of the data."""
    snaps = _snapshots()
    ref = await _reference(bootstrap, tmp_path, snaps)
    prefix, app_id = _prefix()
    await create_worker_topics(bootstrap, prefix)
    await produce(bootstrap, f"{prefix}samples", snapshot_records(snaps[: len(snaps) // 3]))
    return snaps, ref, prefix, app_id


async def _second_third(bootstrap: str, prefix: str, snaps: list) -> None:
    third = len(snaps) // 3
    await produce(bootstrap, f"{prefix}samples", snapshot_records(snaps[third : 2 * third]))


async def _last_third_and_events(bootstrap: str, prefix: str, app_id: str, snaps: list) -> list:
    """Produce the rest of the data (and the closing tail); every event once planned."""
    rest = snaps[2 * (len(snaps) // 3) :] + closing_snapshots(snaps)
    await produce(bootstrap, f"{prefix}samples", snapshot_records(rest))
    return await _events(bootstrap, prefix, app_id, timeout_s=400)


def _assert_same_plans(events: list, ref: dict) -> None:
    got = _by_id(events)
    assert sorted(got) == sorted(ref)  # same ids: none missing, none extra
    assert got == ref  # same tenants, ends and quotas


async def test_sigkill_of_the_planning_owner_changes_no_scaling_event(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    snaps, ref, prefix, app_id = await _first_third(kafka_bootstrap, tmp_path)
    with ExitStack() as stack:
        workers = list(_workers(stack, kafka_bootstrap, tmp_path, prefix, app_id, 2))
        owner = await _owner([port for _, port in workers])
        committed = await _wait_committed(kafka_bootstrap, app_id)
        # traffic keeps flowing while the owner dies
        await _second_third(kafka_bootstrap, prefix, snaps)
        workers[owner][0].send_signal(signal.SIGKILL)
        workers[owner][0].wait()
        events = await _last_third_and_events(kafka_bootstrap, prefix, app_id, snaps)
        survivor = workers[1 - owner]
        assert survivor[0].poll() is None
        # the survivor went on from the committed offset, not from the topic's start
        assert await _planning_committed(kafka_bootstrap, app_id) > committed
        assert _planned(survivor[1]) > 0, "the survivor never planned"
    _assert_same_plans(events, ref)


def _logs(tmp_path: Path) -> str:
    """Every worker's log of the test, one after the other."""
    return "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("w*.log")))


async def test_a_graceful_rebalance_changes_no_scaling_event(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    snaps, ref, prefix, app_id = await _first_third(kafka_bootstrap, tmp_path)
    # faust's stall check, every 3 s instead of 5 minutes: a partition that a rebalance
    # hands over is checked from then on, not from the worker's start (stall_clock.py)
    env = {"STREAM_PROCESSING_TIMEOUT": "3"}
    with ExitStack() as stack:
        workers = list(_workers(stack, kafka_bootstrap, tmp_path, prefix, app_id, 2, env))
        owner = await _owner([port for _, port in workers])
        await _wait_committed(kafka_bootstrap, app_id)
        # a third worker joins: every partition is revoked and assigned again, and the
        # planning partition may stay where it was; plans go on across that rebalance
        workers += list(_workers(stack, kafka_bootstrap, tmp_path, prefix, app_id, 1, env))
        await _members(kafka_bootstrap, app_id, 3)
        before = sum(_planned(port) for _, port in workers[:2])
        await _second_third(kafka_bootstrap, prefix, snaps)
        await _planned_more(workers, before)
        # then the owner leaves cleanly: planning moves for sure
        workers[owner][0].send_signal(signal.SIGTERM)
        assert workers[owner][0].wait(timeout=150) == 0  # a stop waits for the rebalance
        events = await _last_third_and_events(kafka_bootstrap, prefix, app_id, snaps)
        rest = [w for i, w in enumerate(workers) if i != owner]
        assert all(proc.poll() is None for proc, _ in rest)
        assert any(_planned(port) > 0 for _, port in rest), "no other worker planned"
    _assert_same_plans(events, ref)
    assert "has not started processing" not in _logs(tmp_path)  # no false stall alarm


async def test_a_stalled_planning_owner_changes_no_scaling_event(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # The planning owner stops without a word (SIGSTOP: a frozen VM, a long pause under
    # memory pressure), its connections still open, while traffic goes on. Once its
    # session times out the group drops it, the other worker takes planning over, and
    # its event producer, with planning's transactional.id, fences the stalled one's.
    # Then the stalled worker wakes up.
    snaps, ref, prefix, app_id = await _first_third(kafka_bootstrap, tmp_path)
    env = {"DPROBE_WORKER_SESSION_TIMEOUT_S": str(SESSION_TIMEOUT_S)}
    with ExitStack() as stack:
        workers = list(_workers(stack, kafka_bootstrap, tmp_path, prefix, app_id, 2, env))
        owner = await _owner([port for _, port in workers])
        (stalled, stalled_port), (other, other_port) = workers[owner], workers[1 - owner]
        committed = await _wait_committed(kafka_bootstrap, app_id)
        before = _planned_or_zero(other_port)
        assert before == 0, "planning had moved before the stall: no owner to stall"
        stack.callback(stalled.send_signal, signal.SIGCONT)  # never left stopped
        stalled.send_signal(signal.SIGSTOP)
        await _second_third(kafka_bootstrap, prefix, snaps)
        # the group rebalances once the stalled member's session has timed out
        await _planned_more([(other, other_port)], before, timeout_s=180.0)
        stalled.send_signal(signal.SIGCONT)
        events = await _last_third_and_events(kafka_bootstrap, prefix, app_id, snaps)
        await _hosts_restore_to_their_newest_state(kafka_bootstrap, app_id)
        assert other.poll() is None
        assert await _planning_committed(kafka_bootstrap, app_id) > committed
        # The resumed worker's event producer is fenced. If it takes a planning record
        # before it notices that it left the group, that record's events are refused and
        # it exits unacknowledged, its log naming ProducerFenced (docs/worker.md);
        # otherwise it rejoins the group as an ordinary member. Which one happens
        # depends on timing.
        code = stalled.poll()
        assert code in (None, EXIT_UNDELIVERED), f"the resumed worker exited with {code}"
        if code == EXIT_UNDELIVERED:
            log = (tmp_path / f"w{stalled_port}.log").read_text(errors="replace")
            assert "ProducerFenced" in log
    _assert_same_plans(events, ref)
