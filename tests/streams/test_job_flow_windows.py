"""The window stage's job flow and levelled pending demand, checked against a plain-Python
reference recomputed from the same JobEvents (no broker: the in-memory stand-ins of
test_batch_semantics); the job book's old stored form still loads."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from dprobe import schema
from dprobe.models.demand import default_profiler, predicted_level
from dprobe.models.job_flow import FlowSettings, job_flow
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.state import job_book
from dprobe.streams.state.bounds import digest
from dprobe.streams.state.window_agg import WindowSettings
from dprobe.streams.windows import Windows
from tests.streams.helpers import (
    closing_snapshots,
    job_lifecycle,
    make_snapshots,
    reference_windows,
)
from tests.streams.test_batch_semantics import (
    UPDATE_PARTITIONS,
    FakeTable,
    FakeTopic,
    _event,
    _updates_log,
)

WINDOW_S = 10.0
EDGES = (4.0, 16.0)
T0 = 1_700_000_000.0
# Attributes and the level the profiler gives them (spelled out by hand, see test_profiler).
KINDS = [
    ({"model": "NeuMF", "batch_size": 256, "amp": True}, "L1"),
    ({"model": "ResNet50", "batch_size": 64, "amp": False}, "L3"),
    ({}, None),  # nothing known: the unknown level (EX)
]
WEIGHT = {"L1": 0.3, "L2": 0.5, "L3": 0.7, "EX": 1.0}


def _jobs(seed: int) -> tuple[list[schema.JobEvent], dict[str, str | None]]:
    """A clean job history (submit, maybe start, maybe finish/cancel) of three tenants,
    one of which sends no telemetry; returns the events in time order and each job's level."""
    rng = random.Random(seed)
    events: list[schema.JobEvent] = []
    level: dict[str, str | None] = {}
    for n in range(40):
        tenant = rng.choice(["vc-a", "vc-b", "vc-jobs"])
        attrs, lvl = rng.choice(KINDS)
        job = f"job{n}"
        level[job] = lvl
        gpus = rng.choice([1, 2, 4, 8])
        t = T0 - 20 + rng.uniform(0, 70)
        common: dict[str, Any] = {"job": job, "tenant": tenant, "gpus": gpus, **attrs}
        events += job_lifecycle(rng, t, common, start_within=25, end_within=30)
    events.sort(key=lambda e: e.ts)
    return events, level


def _bucket(value: float) -> int:
    return sum(1 for e in EDGES if value >= e)


def _reference(
    events: list[schema.JobEvent], level: dict[str, str | None], tenant: str, start: float
) -> dict[str, Any]:
    """The job part of the window ``[start, start + WINDOW_S)`` of ``tenant``, by hand."""
    end = start + WINDOW_S
    submit: dict[str, float] = {}
    started: dict[str, float] = {}
    ended: dict[str, float] = {}
    gpus: dict[str, int] = {}
    out: dict[str, Any] = {
        "running_by_age": [0.0] * 3,
        "pending_by_wait": [0.0] * 3,
        "pending_by_level": dict.fromkeys(WEIGHT, 0.0),
        "submitted": [0, 0.0],
        "started": [0, 0.0],
        "finished": [0, 0.0],
        "finished_by_duration": [0] * 3,
        "pending_weighted": 0.0,
    }
    for e in events:
        if e.tenant != tenant:
            continue
        gpus[e.job] = e.gpus
        inside = start <= e.ts < end
        if e.event == "submit":
            submit[e.job] = e.ts
            key = "submitted"
        elif e.event == "start":
            started[e.job] = e.ts
            key = "started"
        else:
            ended[e.job] = e.ts
            key = "finished"
            if inside and e.job in started:
                out["finished_by_duration"][_bucket(e.ts - started[e.job])] += 1
        if inside:
            out[key][0] += 1
            out[key][1] += e.gpus
    for job, t in submit.items():
        if t >= end or ended.get(job, end) < end:
            continue
        if started.get(job, end) < end:
            out["running_by_age"][_bucket(end - started[job])] += gpus[job]
        else:
            out["pending_by_wait"][_bucket(end - t)] += gpus[job]
            lvl = level[job] or "EX"
            out["pending_by_level"][lvl] += gpus[job]
            out["pending_weighted"] += gpus[job] * WEIGHT[lvl]
    return out


def _windows(features: FakeTopic, table: FakeTable, **settings: Any) -> Windows:
    stats = WorkerStats()
    profiler = default_profiler()
    return Windows(
        table=table,
        features_topic=features,
        window=WindowSettings(
            window_s=WINDOW_S, grace_s=2.0, flow=FlowSettings(edges_s=EDGES), **settings
        ),
        stats=stats,
        sources=1,
        deadletter=DeadLetters(FakeTopic(), stats),
        level_of=lambda ev: predicted_level(ev, profiler),
    )


def _snapshots() -> list[schema.HostSnapshot]:
    """Telemetry of the tenants (50 s), then a tail that moves every watermark on."""
    snaps = make_snapshots(hosts=2, ticks=50, t0=T0, seed=5)
    return snaps + closing_snapshots(snaps, seconds=40)


def _when(value: bytes) -> float:
    update = codec.decode_update(value)
    if isinstance(update, list):
        return max(p.ts for p in update)
    return update.ts


async def _run(events: list[schema.JobEvent], *, duplicate: bool) -> list[schema.TenantWindow]:
    log = await _updates_log(_snapshots(), 1)
    # each job event goes to its tenant's partition, in event-time order among the updates
    merged: list[tuple[float, int, int, bytes]] = [
        (_when(e.value), i, e.message.partition, e.value) for i, e in enumerate(log)
    ]
    for i, ev in enumerate(events):
        part = sum(ev.tenant.encode()) % UPDATE_PARTITIONS
        copies = 2 if duplicate and i % 3 == 0 else 1  # at-least-once: some come twice
        merged += [(ev.ts, -1, part, codec.encode_job(ev))] * copies
    merged.sort(key=lambda m: (m[0], m[1]))
    features = FakeTopic()
    stage = _windows(features, FakeTable())
    for offset, (_, _, part, value) in enumerate(merged):
        await stage.on_updates([_event("updates", part, offset, value)])
    return [schema.decode_window(v) for _, _, v in features.sent]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_window_job_flow_matches_a_reference_from_the_same_job_events(seed: int) -> None:
    events, level = _jobs(seed)
    windows = asyncio.run(_run(events, duplicate=seed != 1))
    assert windows
    tele = reference_windows(_snapshots(), WINDOW_S)
    closed_before = max(w.window_end for w in windows)
    seen = set()
    for w in windows:
        seen.add((w.tenant, w.window_start))
        if w.tenant not in {e.tenant for e in events}:
            assert w.flow is None  # no job events: nothing known about its jobs
            continue
        ref = _reference(events, level, w.tenant, w.window_start)
        f = w.flow
        assert f is not None and f.edges_s == EDGES
        assert list(f.running_by_age) == pytest.approx(ref["running_by_age"])
        assert list(f.pending_by_wait) == pytest.approx(ref["pending_by_wait"])
        assert {k: getattr(f.pending_by_level, k) for k in WEIGHT} == ref["pending_by_level"]
        assert (f.submitted_jobs, f.submitted_gpus) == tuple(ref["submitted"])
        assert (f.started_jobs, f.started_gpus) == tuple(ref["started"])
        assert (f.finished_jobs, f.finished_gpus) == tuple(ref["finished"])
        assert list(f.finished_by_duration) == ref["finished_by_duration"]
        assert w.pending_gpus == sum(ref["pending_by_wait"])
        assert w.running_gpus >= sum(ref["running_by_age"])
        running_part = tele.get((w.tenant, w.window_start), {}).get("effective_demand_gpus", 0.0)
        assert w.effective_demand_gpus == pytest.approx(running_part + ref["pending_weighted"])
    # the tenant without telemetry gets a window whenever it has jobs or job events
    for k in range(int((closed_before - T0 + 30) // WINDOW_S)):
        start = T0 - 30 + k * WINDOW_S
        if start + WINDOW_S > closed_before:
            break
        ref = _reference(events, level, "vc-jobs", start)
        said = any(ref[x][0] for x in ("submitted", "started", "finished"))
        active = sum(ref["running_by_age"]) + sum(ref["pending_by_wait"]) > 0
        if start >= T0:
            assert (("vc-jobs", start) in seen) == (said or active), start


def test_effective_demand_weighs_pending_jobs_by_their_predicted_level() -> None:
    # by hand: 4 GPUs of NeuMF (L1, 0.3) + 2 GPUs never levelled (EX, 1.0) wait;
    # 8 GPUs of ResNet50 run (the scheduler's running GPUs are not levelled)
    profiler = default_profiler()
    book = job_book.initial()
    evs = [
        schema.JobEvent(
            ts=1,
            event="submit",
            job="a",
            tenant="t",
            gpus=4,
            model="NeuMF",
            batch_size=256,
            amp=True,
        ),
        schema.JobEvent(ts=2, event="submit", job="b", tenant="t", gpus=2),
        schema.JobEvent(ts=3, event="start", job="c", tenant="t", gpus=8, model="ResNet50"),
    ]
    for ev in evs:
        book = job_book.apply(book, ev, level=predicted_level(ev, profiler))
    from dprobe.models.job_flow import pending_effective_gpus
    from dprobe.models.levels import LevelSettings
    from dprobe.streams.state.window_agg import initial, result

    active = job_book.active_at(book, 10.0)
    w = result(
        initial("t", 0.0),
        WindowSettings(window_s=10.0),
        pending_gpus=6.0,
        scheduled_running_gpus=8.0,
        pending_effective_gpus=pending_effective_gpus(active, LevelSettings()),
    )
    assert w.effective_demand_gpus == pytest.approx(4 * 0.3 + 2 * 1.0)
    assert (w.pending_gpus, w.running_gpus) == (6.0, 8.0)
    # the default (no levels known) is the flat weight of the unknown level, EX = 1.0
    flat = result(initial("t", 0.0), WindowSettings(window_s=10.0), pending_gpus=6.0)
    assert flat.effective_demand_gpus == 6.0


def test_an_old_format_job_book_still_loads_and_flows() -> None:
    old = {"jobs": {"q": ["pending", 8, 5.0], "r": ["running", 4, 3.0]}, "done": {"x": 1.0}}
    assert job_book.totals(old) == (8.0, 4.0)
    active = job_book.active_at(old, 10.0)
    assert [(j.gpus, j.submit_ts, j.start_ts, j.level) for j in active] == [
        (8, 5.0, None, None),
        (4, 3.0, 3.0, None),
    ]
    assert job_book.events_in(old, 0.0, 10.0) == []
    f = job_flow(active, [], end=10.0, settings=FlowSettings(edges_s=EDGES))
    assert f.pending_by_level.EX == 8 and list(f.running_by_age) == [0.0, 4.0, 0.0]
    new = job_book.apply(old, schema.JobEvent(ts=11, event="start", job="q", tenant="t", gpus=8))
    assert job_book.totals(new) == (0.0, 12.0)
    assert [(e.kind, e.gpus) for e in job_book.events_in(new, 10.0, 20.0)] == [("start", 8)]
    # the job that moved is now stored under its digest; the other keeps its id until its
    # next event; a stale submit of a finished job (remembered by id) changes nothing
    after = job_book.apply(new, schema.JobEvent(ts=12, event="submit", job="x", tenant="t", gpus=1))
    assert after["jobs"].keys() == {digest("q"), "r"}
    assert after["done"] == {digest("x"): 1.0}
    assert job_book.totals(after) == (0.0, 12.0)


def test_the_window_stage_reads_an_old_format_book_from_its_table() -> None:
    async def run() -> list[schema.TenantWindow]:
        table = FakeTable()
        table.data[b"j|vc-a"] = codec.dumps({"jobs": {"q": ["pending", 8, T0 - 5]}, "done": {}})
        table.data[b"p|0"] = codec.dumps(
            {
                "max_ts": T0 - 5,
                "closed_end": 0.0,
                "open": {"vc-b": [T0]},
                "job_tenants": ["vc-a"],
                "sources": {},
            }
        )
        features = FakeTopic()
        stage = _windows(features, table)
        wm = codec.encode_watermark(codec.SourceWatermark(source=0, ts=T0 + 20))
        await stage.on_updates([_event("updates", 0, 0, wm)])
        return [schema.decode_window(v) for _, _, v in features.sent]

    windows = {w.tenant: w for w in asyncio.run(run())}
    assert set(windows) == {"vc-a", "vc-b"}
    w = windows["vc-a"]
    assert (w.window_start, w.pending_gpus, w.effective_demand_gpus) == (T0, 8.0, 8.0)
    assert w.flow is not None and w.flow.pending_by_level.EX == 8.0
    assert list(w.flow.pending_by_wait) == [0.0, 8.0, 0.0]  # waited 15 s at the end: [4, 16)
    assert windows["vc-b"].flow is None  # no job events: nothing known about its jobs


def test_an_archive_of_job_events_replays_into_windows_with_a_flow(tmp_path: Any) -> None:
    """Archive rows of JobEvents as every dprobe version writes them (schema v1 values,
    archive layout unchanged): read back, they give the window stage the same flow."""
    from dprobe.sinks.archive_schema import row_of
    from dprobe.sinks.parquet_archive import ArchiveWriter
    from dprobe.traces.archive_reader import read_archive

    events, _ = _jobs(7)
    writer = ArchiveWriter(tmp_path, fsync=False)
    for i, ev in enumerate(events):
        value = schema.encode(ev)
        assert value.startswith(b'{"v":1,')
        writer.add(
            "jobs",
            row_of(
                "jobs",
                ev,
                key=ev.job.encode(),
                value=value,
                partition=0,
                offset=i,
                timestamp_ms=None,
            ),
        )
    writer.flush()
    replayed = [schema.decode_job_event(r.value) for r in read_archive(tmp_path)]
    assert replayed == events
    windows = asyncio.run(_run(replayed, duplicate=False))
    job_tenants = {ev.tenant for ev in events}
    assert windows and all(w.flow is not None for w in windows if w.tenant in job_tenants)


@pytest.mark.parametrize("with_samples_source", [True, False])
def test_a_tenant_without_telemetry_gets_every_window_its_jobs_speak_of(
    with_samples_source: bool,
) -> None:
    """No host sends telemetry to this partition: the windows of its job tenants come from
    their job books alone (in bursts with quiet gaps), as the samples topic's watermarks
    (or, with every samples partition reported empty, the job events' own time) pass
    their ends."""
    rng = random.Random(11)
    events: list[schema.JobEvent] = []
    level: dict[str, str | None] = {}
    for n in range(12):
        burst = T0 + (n // 4) * 120.0  # three bursts, two minutes apart
        attrs, lvl = rng.choice(KINDS)
        job = f"job{n}"
        level[job] = lvl
        common: dict[str, Any] = {"job": job, "tenant": "vc-jobs", "gpus": rng.choice([1, 4, 8])}
        events += job_lifecycle(
            rng, burst + rng.uniform(0, 15), {**common, **attrs}, start_within=30, end_within=90
        )
    events.sort(key=lambda e: e.ts)
    end = events[-1].ts + 60.0
    merged = [(e.ts, codec.encode_job(e)) for e in events]
    if not with_samples_source:  # what the ingest stage reports of an empty samples partition
        merged.append((0.0, codec.encode_watermark(codec.SourceWatermark(source=0, ts=0.0))))
    if with_samples_source:
        ticks = int((end - T0) // 7) + 1
        merged += [
            (T0 + 7 * k, codec.encode_watermark(codec.SourceWatermark(source=0, ts=T0 + 7 * k)))
            for k in range(ticks)
        ]
    merged.sort(key=lambda m: m[0])

    async def run() -> list[schema.TenantWindow]:
        features = FakeTopic()
        stage = _windows(features, FakeTable())
        for offset, (_, value) in enumerate(merged):
            await stage.on_updates([_event("updates", 0, offset, value)])
        return [schema.decode_window(v) for _, _, v in features.sent]

    windows = asyncio.run(run())
    got = {w.window_start: w for w in windows}
    assert len(got) == len(windows) and {w.tenant for w in windows} == {"vc-jobs"}
    last_end = max(w.window_end for w in windows)
    grace = 2.0
    newest = merged[-1][0]
    assert last_end == (newest - grace) // WINDOW_S * WINDOW_S  # every window due is out
    first = min(e.ts for e in events) // WINDOW_S * WINDOW_S
    expected = set()
    start = first
    while start + WINDOW_S <= last_end:
        ref = _reference(events, level, "vc-jobs", start)
        said = any(ref[x][0] for x in ("submitted", "started", "finished"))
        active = sum(ref["running_by_age"]) + sum(ref["pending_by_wait"]) > 0
        if said or active:
            expected.add(start)
            w = got[start]
            assert w.pending_gpus == sum(ref["pending_by_wait"])
            assert w.running_gpus == sum(ref["running_by_age"])
            assert w.flow is not None
            assert (w.flow.submitted_jobs, w.flow.finished_jobs) == (
                ref["submitted"][0],
                ref["finished"][0],
            )
        start += WINDOW_S
    assert set(got) == expected
    assert len(expected) > 10  # the bursts and the jobs that outlive them
    quiet = [s for s in range(int(first), int(last_end), int(WINDOW_S)) if s not in expected]
    assert quiet  # and the gaps with nothing to say get no window


def test_job_events_read_ahead_of_a_samples_backlog_do_not_make_it_late() -> None:
    """A worker starts on a backlog: the jobs topic, small, is read before any samples
    partition has reported, and its newest event is ahead of the telemetry. The job
    events' time closes no window while a samples partition has not reported: none of
    the telemetry is late, and every telemetry window holds what a plain recomputation
    from the snapshots says."""
    events, _ = _jobs(1)
    snaps = _snapshots()
    assert max(e.ts for e in events) > min(s.ts for s in snaps) + 3 * WINDOW_S

    async def run() -> tuple[Windows, list[schema.TenantWindow]]:
        log = await _updates_log(snaps, 1)
        features = FakeTopic()
        stage = _windows(features, FakeTable())
        jobs = [
            _event("updates", sum(ev.tenant.encode()) % UPDATE_PARTITIONS, i, codec.encode_job(ev))
            for i, ev in enumerate(events)
        ]
        await stage.on_updates(jobs)  # the whole jobs topic first
        for offset, e in enumerate(log, start=len(jobs)):
            await stage.on_updates([_event("updates", e.message.partition, offset, e.value)])
        return stage, [schema.decode_window(v) for _, _, v in features.sent]

    stage, windows = asyncio.run(run())
    assert stage.stats.late_partials == 0
    tele = reference_windows(snaps, WINDOW_S)
    closed = max(w.window_end for w in windows)
    got = {(w.tenant, w.window_start): w for w in windows}
    due = [key for key in tele if key[1] + WINDOW_S <= closed]
    assert len(due) > 20
    for key in due:
        assert (got[key].hosts, got[key].samples) == (tele[key]["hosts"], tele[key]["samples"])


def test_a_jump_in_event_time_fills_job_only_windows_of_the_last_job_fill_s_only() -> None:
    """A job queued when event time jumps an hour ahead (as a replay into topics that held
    older data jumps years): its tenant gets the windows of the last ``job_fill_s`` before
    the new watermark, each with the job pending, not one per window of the whole gap."""
    fill_s = 100.0
    submit = schema.JobEvent(ts=T0 + 1.0, event="submit", job="q", tenant="vc-q", gpus=8)
    jump = T0 + 3_600.0
    marks = [T0 + 3.0, jump]

    async def run() -> list[schema.TenantWindow]:
        features = FakeTopic()
        stage = _windows(features, FakeTable(), job_fill_s=fill_s)
        values = [codec.encode_job(submit)] + [
            codec.encode_watermark(codec.SourceWatermark(source=0, ts=t)) for t in marks
        ]
        for offset, value in enumerate(values):
            await stage.on_updates([_event("updates", 0, offset, value)])
        return [schema.decode_window(v) for _, _, v in features.sent]

    windows = asyncio.run(run())
    watermark = jump - 2.0  # the newest time less grace_s
    last = (watermark // WINDOW_S) * WINDOW_S  # the end of the last window due
    oldest = ((watermark - fill_s) // WINDOW_S) * WINDOW_S
    expected = [oldest + k * WINDOW_S for k in range(int((last - oldest) // WINDOW_S))]
    assert [w.window_start for w in windows] == expected and len(expected) == 10
    assert {(w.tenant, w.pending_gpus, w.running_gpus) for w in windows} == {("vc-q", 8, 0)}


def test_a_late_job_event_is_counted_and_still_changes_the_book() -> None:
    """A finish that arrives after its window closed: the next windows no longer hold the
    job, the closed one is not sent again, and the late event is counted."""
    submit = schema.JobEvent(ts=T0 + 1, event="submit", job="j", tenant="vc-a", gpus=8)
    finish = schema.JobEvent(ts=T0 + 3, event="finish", job="j", tenant="vc-a", gpus=8)

    def wm(ts: float) -> bytes:
        return codec.encode_watermark(codec.SourceWatermark(source=0, ts=ts))

    async def run() -> tuple[list[schema.TenantWindow], int]:
        features = FakeTopic()
        stage = _windows(features, FakeTable())
        log = [codec.encode_job(submit), wm(T0 + 22), codec.encode_job(finish), wm(T0 + 42)]
        for offset, value in enumerate(log):
            await stage.on_updates([_event("updates", 0, offset, value)])
        return [schema.decode_window(v) for _, _, v in features.sent], stage.stats.late_job_events

    windows, late = asyncio.run(run())
    start = T0 // WINDOW_S * WINDOW_S
    assert [(w.window_start, w.pending_gpus) for w in windows] == [
        (start, 8.0),
        (start + WINDOW_S, 8.0),
    ]  # out before the finish arrived; after it, the job is gone and nothing is said
    assert late == 1
