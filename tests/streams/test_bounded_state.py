"""Every value the window stage stores stays under its byte budget, whatever the input.

A table value travels as one changelog record; past the producer's message limit the
worker would stop on every restart. The cases that used to exceed 1 MiB (45,000 jobs of
one tenant finished within a day; 6,000 hosts of one tenant in one window) now fit, and
at the worst sizes the schema allows (256-character names that JSON escapes to six bytes
a character, the largest numbers) no value passes the budget: what would is dead-lettered
with reason ``state_full`` and everything else is still counted exactly.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dprobe import schema
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.state.window_agg import (
    HOST_ENTRY_BYTES,
    STATE_BASE_BYTES,
    Partial,
    WindowSettings,
)
from dprobe.streams.windows import Windows
from tests.streams.test_batch_semantics import FakeTable, FakeTopic, _event

T0 = 1_700_000_040.0
DEFAULT_BUDGET = WindowSettings().max_state_bytes


def _stage(table: FakeTable, features: FakeTopic, dead: FakeTopic, **cfg: Any) -> Windows:
    stats = WorkerStats()
    return Windows(
        table=table,
        features_topic=features,
        window=WindowSettings(window_s=60.0, grace_s=0.0, **cfg),
        stats=stats,
        sources=1,
        deadletter=DeadLetters(dead, stats),
    )


def _largest(table: FakeTable) -> int:
    """The largest value the table ever logged to its changelog."""
    return max((len(v) for _, _, v in table.changelog if v is not None), default=0)


async def _feed(stage: Windows, values: list[bytes], batch: int = 500) -> None:
    events = [_event("updates", 0, i, v) for i, v in enumerate(values)]
    for i in range(0, len(events), batch):
        await stage.on_updates(events[i : i + batch])


def _partial(tenant: str, host: str, seq: int, ts: float, samples: int = 4) -> Partial:
    return Partial(
        tenant=tenant, window_start=60.0 * (ts // 60.0), host=host, seq=seq, ts=ts,
        samples=samples, instance_s=1.0 * samples, gpu_s=1.0, util_sum=50.0 * samples,
        levels=(0, samples, 0, 0), weighted_s=0.5 * samples,
    )  # fmt: skip


def _close_all(ts: float) -> bytes:
    return codec.encode_watermark(codec.SourceWatermark(source=0, ts=ts))


def _windows(features: FakeTopic) -> list[schema.TenantWindow]:
    return [schema.decode_window(v) for _, _, v in features.sent]


def test_45000_jobs_finished_in_one_tenant_within_a_day_fit() -> None:
    async def run() -> tuple[FakeTable, FakeTopic, FakeTopic]:
        table, features, dead = FakeTable(), FakeTopic(), FakeTopic()
        stage = _stage(table, features, dead)
        values = []
        for i in range(45_000):  # one job a second for 12.5 hours: all remembered (a day)
            job = f"sweep-{i:06d}-" + "x" * 40
            ts = T0 + i
            for event in ("submit", "finish"):
                ev = schema.JobEvent(ts=ts, event=event, job=job, tenant="vc-a", gpus=1)
                values.append(codec.encode_job(ev))
            if i % 60 == 0:  # a host of the tenant reports, and its partition's progress
                values.append(codec.encode_partials([_partial("vc-a", "h1", i, ts)]))
                values.append(_close_all(ts))
        values.append(_close_all(T0 + 45_000 + 120))
        await _feed(stage, values)
        return table, features, dead

    table, features, dead = asyncio.run(run())
    assert dead.sent == []
    assert _largest(table) <= DEFAULT_BUDGET
    windows = _windows(features)
    assert sum(w.flow.submitted_jobs for w in windows if w.flow) == 45_000
    assert sum(w.flow.finished_jobs for w in windows if w.flow) == 45_000


def test_6000_hosts_of_one_tenant_in_one_window_fit() -> None:
    async def run() -> tuple[FakeTable, FakeTopic, FakeTopic]:
        table, features, dead = FakeTable(), FakeTopic(), FakeTopic()
        stage = _stage(table, features, dead)
        hosts = [f"gpu-node-{i:05d}." + "rack-a." * 25 + "example.net" for i in range(6_000)]
        values = [codec.encode_partials([_partial("vc-a", h, 1, T0 + 5.0)]) for h in hosts]
        values.append(_close_all(T0 + 120.0))
        await _feed(stage, values)
        return table, features, dead

    table, features, dead = asyncio.run(run())
    assert dead.sent == []
    assert _largest(table) <= DEFAULT_BUDGET
    [window] = _windows(features)
    assert (window.hosts, window.samples) == (6_000, 24_000)


# the worst names the schema allows: 256 characters that JSON escapes to 6 bytes each
WORST = st.sampled_from(["\x00", "\x1f", "\U0001f600", "a"]).map(lambda c: c * 256)
SEQ = st.integers(min_value=0, max_value=2**53)
BUDGET = 16_384  # small, so a few hundred records reach it


@settings(max_examples=15, deadline=None)
@given(
    tenants=st.lists(WORST, min_size=1, max_size=3, unique=True),
    hosts=st.integers(min_value=50, max_value=600),
    jobs=st.integers(min_value=20, max_value=200),
    seq=SEQ,
    shards=st.sampled_from([1, 2, 4]),
)
def test_at_the_worst_sizes_no_value_passes_its_budget_and_nothing_is_lost(
    tenants: list[str], hosts: int, jobs: int, seq: int, shards: int
) -> None:
    async def run() -> tuple[FakeTable, FakeTopic, FakeTopic, list[bytes]]:
        table, features, dead = FakeTable(), FakeTopic(), FakeTopic()
        stage = _stage(
            table, features, dead, max_state_bytes=BUDGET, host_shards=shards,
            book_shards=shards, index_shards=shards,
        )  # fmt: skip
        values = []
        for t_i, tenant in enumerate(tenants):
            for h in range(hosts):
                host = f"{h:04d}" + "\x00" * 252  # distinct worst-size hosts
                values.append(codec.encode_partials([_partial(tenant, host, seq, T0 + t_i)]))
            for j in range(jobs):
                job = f"{j:04d}" + "\U0001f600" * 252
                ev = schema.JobEvent(ts=T0 + 1e-3 * j, event="submit", job=job, tenant=tenant,
                                     gpus=1_000, batch_size=2**31 - 1)  # fmt: skip
                values.append(codec.encode_job(ev))
        values.append(_close_all(T0 + 60.0 * 3))
        await _feed(stage, values, batch=97)
        return table, features, dead, values

    table, features, dead, values = asyncio.run(run())
    assert _largest(table) <= BUDGET
    letters = [schema.decode(v, schema.DeadLetter) for _, _, v in dead.sent]
    assert {d.reason for d in letters} <= {"state_full"}
    rejected = {d.offset for d in letters}
    windows: dict[str, list[schema.TenantWindow]] = {}
    for w in _windows(features):
        windows.setdefault(w.tenant, []).append(w)
    for tenant in tenants:
        kept = [codec.decode_update(v) for i, v in enumerate(values) if i not in rejected]
        parts = [u for u in kept if isinstance(u, list) and u[0].tenant == tenant]
        jobs_kept = [u for u in kept if isinstance(u, schema.JobEvent) and u.tenant == tenant]
        # the window of the data, then the job-only windows of the jobs still queued
        first, *later = windows[tenant]
        starts = [T0, T0 + 60.0, T0 + 120.0] if jobs_kept else [T0]
        assert [w.window_start for w in windows[tenant]] == starts
        assert first.hosts == len(parts)  # every partial applied or dead-lettered, none twice
        assert first.samples == 4 * len(parts)
        assert all(w.hosts == 0 for w in later)
        assert {w.pending_gpus for w in windows[tenant]} == {1_000.0 * len(jobs_kept)}
    if shards == 1 and STATE_BASE_BYTES + HOST_ENTRY_BYTES * hosts > BUDGET:
        assert rejected, "the budget was passed and nothing was dead-lettered"


def test_one_tenants_partials_of_a_batch_are_split_under_the_message_limit() -> None:
    from dprobe.streams.ingest import Ingest
    from tests.streams.helpers import make_snapshots

    async def run(limit: int) -> list[bytes]:
        updates = FakeTopic(2)
        stats = WorkerStats()
        ingest = Ingest(
            hosts_table=FakeTable(), updates_topic=updates,
            deadletter=DeadLetters(FakeTopic(), stats), window=WindowSettings(window_s=10.0),
            stats=stats, max_message_bytes=limit, update_partitions=2,
        )  # fmt: skip
        snaps = make_snapshots(hosts=300, ticks=2)
        await ingest.on_snapshots(
            [
                _event("samples", 0, i, schema.encode(s), s.host.encode())
                for i, s in enumerate(snaps)
            ]
        )
        return [v for _, _, v in updates.sent if v.startswith(codec.PARTIAL)]

    whole, split = asyncio.run(run(1 << 20)), asyncio.run(run(8_192))
    assert max(len(v) for v in split) <= 4_096 < max(len(v) for v in whole)
    # the same partials, in the same order, only cut into more messages
    flat = [p for v in split for p in codec.decode_update(v)]  # type: ignore[union-attr]
    assert flat == [p for v in whole for p in codec.decode_update(v)]  # type: ignore[union-attr]
