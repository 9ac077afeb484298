"""A worker restarted with SIGTERM again and again while live collectors keep sending.

Hosts send one snapshot per tick with consecutive seqs, paced in wall time (event time
runs ``TICKS_PER_S`` times faster than wall time). The worker is stopped with SIGTERM (a
graceful stop: faust finishes its batches, flushes and commits) and started again, several
times, while that traffic flows. Every TenantWindow it emits must equal the window
recomputed in plain Python from the snapshots sent (``reference_windows``, which shares no
code with the worker): no snapshot lost (a restart once lost one, see
:mod:`dprobe.streams.recovery`), none counted twice, no window emitted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from dprobe import schema
from tests.streams.helpers import (
    assert_window_matches,
    closing_snapshots,
    create_worker_topics,
    make_snapshots,
    reference_windows,
    worker_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WINDOW_S = 10.0
GRACE_S = 2.0
T0 = 1_700_000_000.0
PARTITIONS = 4
HOSTS = 8  # host-0 .. host-7 hash onto every samples partition (checked below)
TICKS_PER_S = 12.0
MAX_TICKS = 8_000  # 11 min of traffic at most: it runs until the restarts are done (on a
# quiet machine a few hundred ticks; five restarts on a loaded one can take minutes)
RESTARTS = 5

Key = tuple[str, float]  # (tenant, window start)


class Features:
    """Every TenantWindow of the features topic, read from its start in the background."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            group_id=None,
        )
        self.windows: list[schema.TenantWindow] = []
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Features:
        await self.consumer.start()
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self.consumer.stop()

    async def _read(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200)
            for records in batch.values():
                self.windows += [schema.decode_window(r.value) for r in records]
            if batch:
                self._arrived.set()

    def keys(self) -> set[Key]:
        return {(w.tenant, w.window_start) for w in self.windows}

    async def wait(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``done()`` holds (checked as windows arrive) or the time is up."""
        deadline = time.monotonic() + timeout_s
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout=min(left, 1.0))
        return True


async def _send_live(
    bootstrap: str,
    topic: str,
    ticks: list[list[schema.HostSnapshot]],
    per_s: float,
    stop: asyncio.Event | None = None,
) -> list[schema.HostSnapshot]:
    """Send each tick's snapshots (key = host, as collectors do), ``per_s`` ticks per
    second of wall time, until ``stop`` is set; returns what was sent."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5
    )
    sent: list[schema.HostSnapshot] = []
    async with producer:
        start = time.monotonic()
        for k, tick in enumerate(ticks):
            if stop is not None and stop.is_set():
                break
            for snap in tick:
                await producer.send(topic, key=snap.host.encode(), value=schema.encode(snap))
            sent += tick
            await asyncio.sleep(max(0.0, start + (k + 1) / per_s - time.monotonic()))
        await producer.flush()
    return sent


def _by_tick(snaps: list[schema.HostSnapshot]) -> list[list[schema.HostSnapshot]]:
    """The snapshots of each tick (every host is at the same seq in a tick)."""
    ticks: dict[int, list[schema.HostSnapshot]] = {}
    for s in snaps:
        ticks.setdefault(s.seq, []).append(s)
    return [ticks[k] for k in sorted(ticks)]


def _closable(tail: list[schema.HostSnapshot], ref: dict[Key, dict]) -> set[Key]:
    """The windows every samples partition's progress passes once ``tail`` is in."""
    last: dict[str, float] = {}
    for s in tail:
        last[s.host] = max(last.get(s.host, 0.0), s.ts)
    watermark = min(last.values()) - GRACE_S
    return {key for key in ref if key[1] + WINDOW_S <= watermark}


async def _run_mid_stream(features: Features, run: int, rng: random.Random) -> None:
    """Let a started worker run until it emits windows, then a little more."""
    before = len(features.windows)
    emitting = await features.wait(lambda: len(features.windows) > before, 60)
    assert emitting, f"run {run}: no window within 60 s"
    await asyncio.sleep(rng.uniform(0.5, 2.5))


async def test_sigterm_restarts_under_live_traffic_lose_and_double_count_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"t{tag}.", f"worker-{tag}"
    samples = f"{prefix}samples"
    await create_worker_topics(kafka_bootstrap, prefix, partitions=PARTITIONS)
    hash_of = DefaultPartitioner()
    used = {hash_of(f"host-{h}".encode(), list(range(PARTITIONS)), None) for h in range(HOSTS)}
    assert used == set(range(PARTITIONS)), "a samples partition without hosts waits to be idle"
    rng = random.Random(15)
    stop_traffic = asyncio.Event()
    exits: list[int] = []
    async with Features(kafka_bootstrap, f"{prefix}features") as features:
        live = make_snapshots(hosts=HOSTS, ticks=MAX_TICKS, t0=T0, seed=15)
        traffic = asyncio.create_task(
            _send_live(kafka_bootstrap, samples, _by_tick(live), TICKS_PER_S, stop_traffic)
        )
        worker = functools.partial(
            worker_process,
            kafka_bootstrap,
            prefix=prefix,
            app_id=app_id,
            data_dir=tmp_path / "w",
            window_s=WINDOW_S,
            grace_s=GRACE_S,
            log=tmp_path / "worker.log",
            partitions=PARTITIONS,
        )
        for run in range(RESTARTS):
            with worker() as proc:
                await _run_mid_stream(features, run, rng)
                assert not traffic.done(), "the traffic ended before the last restart"
                proc.send_signal(signal.SIGTERM)
                exits.append(await asyncio.to_thread(proc.wait, 30))
        with worker() as proc:
            await _run_mid_stream(features, RESTARTS, rng)
            stop_traffic.set()
            snaps = await traffic
            tail = closing_snapshots(snaps, seconds=3 * WINDOW_S)
            await _send_live(kafka_bootstrap, samples, _by_tick(tail), 4 * TICKS_PER_S)
            ref = reference_windows(snaps + tail, WINDOW_S)
            closable = _closable(tail, ref)
            await features.wait(lambda: closable <= features.keys(), 60)
            await asyncio.sleep(2)  # a window emitted twice would arrive now
            assert proc.poll() is None, "the worker died"
        got = list(features.windows)

    assert exits == [0] * RESTARTS, f"exit codes after SIGTERM: {exits}"
    assert len({start for _, start in closable}) >= 8, "too little traffic to tell"
    counts: dict[Key, int] = {}
    for w in got:
        counts[(w.tenant, w.window_start)] = counts.get((w.tenant, w.window_start), 0) + 1
    missing = sorted(closable - set(counts))
    assert not missing, f"{len(missing)} windows never emitted: {missing[:8]}"
    twice = sorted(key for key, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} windows emitted more than once: {twice[:8]}"
    wrong = [
        (w.tenant, w.window_start, w.samples, ref[(w.tenant, w.window_start)]["samples"])
        for w in got
        if w.lost_snapshots or w.samples != ref[(w.tenant, w.window_start)]["samples"]
    ]
    assert not wrong, f"(tenant, start, samples, expected samples), lost > 0 or short: {wrong}"
    for w in got:
        assert_window_matches(w, ref[(w.tenant, w.window_start)], WINDOW_S)
