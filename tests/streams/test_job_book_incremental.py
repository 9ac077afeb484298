"""The job book one value per job: a job event writes O(1) table values whatever the number
of the tenant's jobs, and the windows stay those of a plain-Python reference recomputed
from the same job events, across restarts from the table (the changelog), a partition
moving between two workers and back, duplicates and out-of-order events."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from dprobe import schema
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.state import job_book
from dprobe.streams.state.bounds import digest
from dprobe.streams.state.window_agg import Partial, WindowSettings
from dprobe.streams.windows import Windows
from tests.streams.helpers import job_lifecycle
from tests.streams.test_batch_semantics import FakeTable, FakeTopic, _event

WINDOW_S = 10.0
EDGES = (4.0, 16.0)
T0 = 1_700_000_000.0
LEVEL = {0: "L1", 1: "L3", 2: None}  # the level of job n: LEVEL[n % 3]


def _level(ev: schema.JobEvent) -> Any:
    return LEVEL[int(ev.job[3:]) % 3] if ev.job[3:].isdigit() else None


def _stage(table: FakeTable, features: FakeTopic, **cfg: Any) -> Windows:
    from dprobe.models.job_flow import FlowSettings

    stats = WorkerStats()
    return Windows(
        table=table, features_topic=features, stats=stats, sources=1,
        window=WindowSettings(window_s=WINDOW_S, grace_s=2.0, flow=FlowSettings(edges_s=EDGES),
                              **cfg),
        deadletter=DeadLetters(FakeTopic(), stats),
        level_of=_level,
    )  # fmt: skip


def _traffic(seed: int) -> list[bytes]:
    """Job events of three tenants, shuffled a little (out of order), some twice, with
    watermarks that close windows as time goes on."""
    rng = random.Random(seed)
    events = []
    for n in range(120):
        tenant = rng.choice(["vc-a", "vc-b", "vc-c"])
        gpus = rng.choice([1, 2, 4, 8])
        t = T0 + rng.uniform(0, 100)
        common: dict[str, Any] = {"job": f"job{n}", "tenant": tenant, "gpus": gpus}
        events += job_lifecycle(rng, t, common, start_within=20, end_within=25)
    events.sort(key=lambda e: e.ts + rng.uniform(-6, 6))  # out of order, a few seconds
    values = [codec.encode_partials([_partial(T0 + WINDOW_S * k)]) for k in range(16)]
    for ev in events:
        values += [codec.encode_job(ev)] * (2 if rng.random() < 0.2 else 1)
        if rng.random() < 0.1:  # the samples partition's progress, a little behind
            wm = codec.SourceWatermark(source=0, ts=ev.ts - 5)
            values.append(codec.encode_watermark(wm))
    values.append(codec.encode_watermark(codec.SourceWatermark(source=0, ts=T0 + 400)))
    return values


def _partial(start: float) -> Partial:
    """Telemetry of another tenant, so that windows open (and close) every 10 s."""
    return Partial(
        tenant="vc-tele", window_start=start, host="h1", seq=int(start), ts=start + 1.0,
        samples=1, instance_s=1.0, gpu_s=1.0, util_sum=50.0, levels=(0, 1, 0, 0),
        weighted_s=0.5,
    )  # fmt: skip


def _bucket(value: float) -> int:
    return sum(1 for e in EDGES if value >= e)


def _reference(applied: list[schema.JobEvent], tenant: str, start: float) -> dict[str, Any]:
    """The job part of ``tenant``'s window at ``start`` from the events applied before it
    closed, in the order applied: a plain dict per job, rules spelled out again."""
    end = start + WINDOW_S
    jobs: dict[str, dict[str, Any]] = {}
    removed: set[str] = set()
    ended: list[dict[str, Any]] = []
    log: list[tuple[float, str, int, float | None]] = []
    for ev in applied:
        if ev.tenant != tenant or ev.job in removed:
            continue  # a job once removed stays removed
        job = jobs.get(ev.job)
        if ev.event in ("finish", "cancel"):
            removed.add(ev.job)
            if job is None:
                log.append((ev.ts, "finish", ev.gpus, None))
            else:
                del jobs[ev.job]
                ended.append({**job, "end": ev.ts})
                run = ev.ts - job["start"] if job["start"] is not None else None
                log.append((ev.ts, "finish", job["gpus"], run))
        elif job is None:
            level = _level(ev)
            started = ev.ts if ev.event == "start" else None
            jobs[ev.job] = {"gpus": ev.gpus, "submit": ev.ts, "start": started, "level": level}
            log.append((ev.ts, "submit", ev.gpus, None))
            if started is not None:
                log.append((ev.ts, "start", ev.gpus, None))
        elif ev.event == "submit":
            job["submit"] = min(job["submit"], ev.ts)
            if job["start"] is None:
                job["gpus"] = ev.gpus
        elif job["start"] is None:
            job.update(start=ev.ts, gpus=ev.gpus)
            log.append((ev.ts, "start", ev.gpus, None))
        else:
            job.update(start=min(job["start"], ev.ts), gpus=ev.gpus)
    out: dict[str, Any] = {
        "running_by_age": [0.0] * 3, "pending_by_wait": [0.0] * 3,
        "pending_by_level": dict.fromkeys(("L1", "L2", "L3", "EX"), 0.0),
        "submit": [0, 0.0], "start": [0, 0.0], "finish": [0, 0.0], "durations": [0] * 3,
    }  # fmt: skip
    for job in [*jobs.values(), *(j for j in ended if j["end"] >= end)]:
        if job["submit"] >= end:
            continue
        if job["start"] is not None and job["start"] < end:
            out["running_by_age"][_bucket(end - job["start"])] += job["gpus"]
        else:
            out["pending_by_wait"][_bucket(end - job["submit"])] += job["gpus"]
            out["pending_by_level"][job["level"] or "EX"] += job["gpus"]
    for ts, kind, gpus, run in log:
        if start <= ts < end:
            out[kind][0] += 1
            out[kind][1] += gpus
            if run is not None:
                out["durations"][_bucket(max(0.0, run))] += 1
    return out


def _check(w: schema.TenantWindow, ref: dict[str, Any]) -> None:
    f = w.flow
    assert f is not None
    assert list(f.running_by_age) == ref["running_by_age"]
    assert list(f.pending_by_wait) == ref["pending_by_wait"]
    assert {k: getattr(f.pending_by_level, k) for k in ref["pending_by_level"]} == ref[
        "pending_by_level"
    ]
    assert (f.submitted_jobs, f.submitted_gpus) == tuple(ref["submit"])
    assert (f.started_jobs, f.started_gpus) == tuple(ref["start"])
    assert (f.finished_jobs, f.finished_gpus) == tuple(ref["finish"])
    assert list(f.finished_by_duration) == ref["durations"]
    assert w.pending_gpus == sum(ref["pending_by_wait"])


async def _run(values: list[bytes], seed: int, *, moves: bool) -> list[tuple[Any, Any]]:
    """Feed ``values`` one record a batch; at random points the worker restarts from the
    changelog, or (``moves``) the partition goes to a second worker and back to the
    first one, whose books in memory are then stale. Returns each window with the job
    events applied before it closed."""
    rng = random.Random(seed)
    features = FakeTopic()
    table = FakeTable()
    stage = _stage(table, features)
    other: Windows | None = None
    applied: list[schema.JobEvent] = []
    seen: set[tuple[str, int, float]] = set()
    out = []
    for offset, value in enumerate(values):
        if rng.random() < 0.03:  # restart: a new process reads the table from the changelog
            table = FakeTable.recovered(table.changelog)
            stage, other = _stage(table, features), None
        elif moves and rng.random() < 0.05:  # the partition moves to the other worker
            other = other or _stage(table, features)
            stage, other = other, stage
        sent = len(features.sent)
        await stage.on_updates([_event("updates", 0, offset, value)])
        update = codec.decode_update(value)
        if isinstance(update, schema.JobEvent):
            key = (update.job, hash(update.event), update.ts)
            if key not in seen:  # an exact duplicate changes nothing
                seen.add(key)
                applied.append(update)
        for _, _, raw in features.sent[sent:]:
            w = schema.decode_window(raw)
            if w.tenant != "vc-tele":
                out.append((w, list(applied)))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("moves", [False, True])
def test_windows_match_a_reference_across_restarts_moves_and_duplicates(
    seed: int, moves: bool
) -> None:
    values = _traffic(seed)
    windows = asyncio.run(_run(values, seed, moves=moves))
    assert len(windows) > 20
    for w, applied in windows:
        _check(w, _reference(applied, w.tenant, w.window_start))
    # the same as a worker that never restarted
    plain = asyncio.run(_run(values, seed + 1000, moves=False))
    assert [w for w, _ in plain] == [w for w, _ in windows] or not moves


def _writes_per_event(running: int, events: int = 60) -> tuple[float, float]:
    """Changelog records and bytes per job event, one event a batch, with ``running``
    jobs of the same tenant running."""

    async def run() -> tuple[float, float]:
        table = FakeTable()
        stage = _stage(table, FakeTopic())
        load = [
            codec.encode_job(schema.JobEvent(ts=T0, event=k, job=f"job{n}", tenant="t", gpus=1))
            for n in range(running)
            for k in ("submit", "start")
        ]
        for i in range(0, len(load), 1000):
            await stage.on_updates([_event("updates", 0, i, v) for v in load[i : i + 1000]])
        before = len(table.changelog)
        for i in range(events):
            n, kind = running + i // 2, ("submit", "start")[i % 2]
            ev = schema.JobEvent(ts=T0 + 1, event=kind, job=f"job{n}", tenant="t", gpus=1)
            await stage.on_updates([_event("updates", 0, len(load) + i, codec.encode_job(ev))])
        writes = table.changelog[before:]
        book = [(k, v) for _, k, v in writes if not k.startswith(b"p|")]  # the job book's
        return len(book) / events, sum(len(k) + len(v or b"") for k, v in book) / events

    return asyncio.run(run())


def test_a_job_event_writes_the_same_few_bytes_with_10_or_5000_jobs_running() -> None:
    small, large = _writes_per_event(10), _writes_per_event(5_000)
    assert small[0] == large[0] == 2.0  # the job's value and the instance's token
    assert large[1] <= small[1] + 16 < 400  # bytes: the job's value (digits aside)


def test_a_book_stored_whole_by_an_older_worker_moves_job_by_job() -> None:
    async def run() -> tuple[FakeTable, list[schema.TenantWindow]]:
        table = FakeTable()
        old = {"jobs": {"q": ["pending", 8, T0 - 5], digest("r"): ["running", 4, T0 - 9]},
               "done": {"x": T0 - 20}}  # fmt: skip
        table.data[b"j|vc-a|s3"] = codec.dumps(old)
        table.data[b"p|0"] = codec.dumps(
            {"max_ts": T0 - 5, "closed_end": 0.0, "open": {"vc-b": [T0]}, "job_tenants": ["vc-a"],
             "sources": {}}
        )  # fmt: skip
        features = FakeTopic()
        stage = _stage(table, features, book_shards=4)
        for i, ev in enumerate(
            [
                schema.JobEvent(ts=T0 + 1, event="start", job="q", tenant="vc-a", gpus=8),
                schema.JobEvent(ts=T0 + 2, event="submit", job="x", tenant="vc-a", gpus=2),
            ]
        ):
            await stage.on_updates([_event("updates", 0, i, codec.encode_job(ev))])
        wm = codec.encode_watermark(codec.SourceWatermark(source=0, ts=T0 + 20))
        await stage.on_updates([_event("updates", 0, 9, wm)])
        return table, [schema.decode_window(v) for _, _, v in features.sent]

    table, windows = asyncio.run(run())
    assert b"j|vc-a|s3" not in table.data  # the old value is gone, its jobs have their own
    assert {k for k in table.data if k.startswith(b"jb|")} == {
        b"jb|vc-a|" + digest(j).encode() for j in ("q", "r", "x")
    }
    # the partition closed nothing yet: the window before, where the old book's jobs
    # already waited and ran, is out too
    before, w = [w for w in windows if w.tenant == "vc-a"]
    assert (before.window_end, before.pending_gpus, before.running_gpus) == (T0, 8.0, 4.0)
    assert (w.window_start, w.pending_gpus, w.running_gpus) == (T0, 0.0, 12.0)
    assert w.flow is not None and w.flow.started_jobs == 1  # the stale submit of x: nothing
    assert w.flow.submitted_jobs == 0


WORST = "\U0001f600" * 256


def test_a_jobs_value_stays_under_its_bound_at_the_worst_sizes() -> None:
    book = job_book.TenantJobs(shards=1, forget_after_s=1e9)
    ts = -1.2345678901234567e-300
    for i in range(40):  # lifetimes of one job, its removal forgotten each time
        for kind in ("submit", "start", "finish"):
            ev = schema.JobEvent(ts=ts - i, event=kind, job=WORST, tenant=WORST, gpus=1_000_000)
            d = book.apply(ev, level="L1")
            assert d is not None
            value = book.stored(d)
            assert value is not None
            assert len(codec.dumps(value)) <= job_book.entry_bytes_bound(value)
        filler = schema.JobEvent(ts=1e300, event="finish", job=f"{i}", tenant=WORST, gpus=1)
        book.apply(filler)
        forgotten, _ = book.make_room(WORST, 0)  # a full budget: the oldest removals forgotten
        assert digest(WORST) in forgotten
    entry = book.stored(digest(WORST))
    assert entry is not None and len(entry["l"]) == 120  # 40 lifetimes, none pruned yet
    limit = job_book.entry_bytes_bound(entry) + job_book.EVENT_BYTES
    assert book.make_room(WORST, limit - 1)[1] is False  # one more event could pass it


def _job_tenants_stored(table: FakeTable) -> set[str]:
    """The tenants the stored tenant index lists as having job events."""
    out: set[str] = set()
    for key, raw in table.data.items():
        if key.startswith(b"p|") and raw is not None:
            value = codec.loads(raw)
            if isinstance(value, dict):
                out.update(value.get("job_tenants", ()))
    return out


def test_a_tenant_whose_jobs_are_long_gone_leaves_the_books_and_can_come_back() -> None:
    # one job of vc-gone runs and finishes; a day later (the time a removed job is
    # remembered) its book is empty and the tenant leaves the index, in memory and in the
    # table; a restart does not bring it back, and a new job of it starts a new book
    later = T0 + job_book.FORGET_AFTER_S + 1_000.0
    ev = [
        schema.JobEvent(ts=T0 + 1, event="submit", job="job1", tenant="vc-gone", gpus=4),
        schema.JobEvent(ts=T0 + 2, event="start", job="job1", tenant="vc-gone", gpus=4),
        schema.JobEvent(ts=T0 + 25, event="finish", job="job1", tenant="vc-gone", gpus=4),
    ]

    async def run() -> tuple[FakeTable, FakeTopic, Windows, set[str], set[str]]:
        table, features = FakeTable(), FakeTopic()
        stage = _stage(table, features)
        values = [codec.encode_partials([_partial(T0)])] + [codec.encode_job(e) for e in ev]
        values.append(codec.encode_watermark(codec.SourceWatermark(source=0, ts=T0 + 60)))
        values.append(codec.encode_partials([_partial(later)]))
        values.append(codec.encode_watermark(codec.SourceWatermark(source=0, ts=later + 30)))
        for offset, value in enumerate(values[:-2]):
            await stage.on_updates([_event("updates", 0, offset, value)])
        before = _job_tenants_stored(table)
        for offset, value in enumerate(values[-2:], start=len(values) - 2):
            await stage.on_updates([_event("updates", 0, offset, value)])
        return table, features, stage, before, _job_tenants_stored(table)

    table, features, stage, before, after = asyncio.run(run())
    gone = [schema.decode_window(v) for _, _, v in features.sent]
    gone = [w for w in gone if w.tenant == "vc-gone"]
    assert [w.window_start for w in gone] == [T0, T0 + 10, T0 + 20]  # it was there
    assert gone[-1].flow is not None and gone[-1].flow.finished_jobs == 1
    assert before == {"vc-gone"} and after == set()
    assert not [k for k in table.data if k.startswith(b"jb|vc-gone|")]
    assert all(set(index.books) == set() for index in stage._jobs.values())

    async def again() -> list[schema.TenantWindow]:
        restarted = FakeTable.recovered(table.changelog)
        assert _job_tenants_stored(restarted) == set()
        features = FakeTopic()
        stage = _stage(restarted, features)
        t = later + 100
        new = schema.JobEvent(ts=t + 1, event="submit", job="job2", tenant="vc-gone", gpus=2)
        values = [codec.encode_partials([_partial(t)]), codec.encode_job(new)]
        values.append(codec.encode_watermark(codec.SourceWatermark(source=0, ts=t + 30)))
        for offset, value in enumerate(values, start=100):
            await stage.on_updates([_event("updates", 0, offset, value)])
        assert _job_tenants_stored(restarted) == {"vc-gone"}
        return [schema.decode_window(v) for _, _, v in features.sent]

    back = [w for w in asyncio.run(again()) if w.tenant == "vc-gone"]
    assert [(w.window_start, w.pending_gpus) for w in back][:1] == [(later + 100, 2.0)]
