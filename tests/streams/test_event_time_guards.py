"""Event time that one clock cannot break: a snapshot stamped far ahead of its Kafka
record is a dead letter and moves no progress; one a little ahead moves progress only up
to its record's time; a duplicate never moves progress."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec

from dprobe import schema
from dprobe.streams import codec
from tests.streams.helpers import make_snapshots
from tests.streams.test_batch_semantics import FakeTable, FakeTopic, _ingest, _windows


def _event(offset: int, snap: schema.HostSnapshot, record_ts: float) -> Any:
    message = SimpleNamespace(
        topic="samples", partition=0, offset=offset, timestamp=record_ts, key=snap.host.encode()
    )
    return SimpleNamespace(value=schema.encode(snap), message=message)


async def test_a_snapshot_far_ahead_of_its_record_is_a_dead_letter_and_moves_nothing() -> None:
    updates, dead = FakeTopic(2), FakeTopic()
    ingest = _ingest(updates, FakeTable(), deadletters=dead)
    snaps = make_snapshots(hosts=1, ticks=3)
    events = [_event(i, s, s.ts) for i, s in enumerate(snaps)]
    await ingest.on_snapshots(events)
    progress = ingest._source_ts[0]
    assert progress == snaps[-1].ts
    ahead = msgspec.structs.replace(snaps[-1], seq=3, ts=snaps[-1].ts + 86_400.0)
    sent_before = len(updates.sent)
    await ingest.on_snapshots([_event(3, ahead, snaps[-1].ts + 1.0)])
    assert len(updates.sent) == sent_before, "no partials, no progress broadcast"
    assert ingest._source_ts[0] == progress
    (letter,) = [schema.decode(v, schema.DeadLetter) for _, _, v in dead.sent]
    assert letter.reason == "clock_skew" and "ahead of its record's clock" in letter.error
    # within the allowed skew (300 s by default) a snapshot is taken, but it moves its
    # partition's progress only up to its record's time
    near = msgspec.structs.replace(snaps[-1], seq=4, ts=snaps[-1].ts + 200.0)
    sent_before = len(updates.sent)
    await ingest.on_snapshots([_event(4, near, snaps[-1].ts + 1.0)])
    assert len(updates.sent) > sent_before, "its partials are sent"
    assert ingest._source_ts[0] == snaps[-1].ts + 1.0


async def test_a_host_whose_clock_runs_ahead_does_not_make_other_hosts_data_late() -> None:
    """Two hosts on one samples partition; one's clock is 200 s ahead (within the allowed
    skew). Every snapshot of the host with the right clock still lands in its window: the
    windows equal those recomputed from its snapshots alone, and nothing is late."""
    from collections import Counter

    from dprobe.streams.state.window_agg import window_start
    from tests.streams.test_batch_semantics import WINDOW_S, FakeTable, _windows
    from tests.streams.test_batch_semantics import _event as update

    snaps = make_snapshots(hosts=2, ticks=60)
    good = [s for s in snaps if s.host == "host-0"]
    fast = [msgspec.structs.replace(s, ts=s.ts + 200.0) for s in snaps if s.host == "host-1"]
    events = []
    for g, f in zip(good, fast, strict=True):  # appended to the log as they happen
        events += [_event(len(events), g, g.ts + 0.05), _event(len(events) + 1, f, g.ts + 0.05)]
    updates = FakeTopic(2)
    ingest = _ingest(updates, FakeTable())
    for i in range(0, len(events), 8):
        await ingest.on_snapshots(events[i : i + 8])
    features, table = FakeTopic(), FakeTable()
    stage = _windows(features, table)
    await stage.on_updates([update("u", p, i, v) for i, (p, _, v) in enumerate(updates.sent)])
    assert stage.stats.late_partials == 0
    emitted = [schema.decode_window(v) for _, _, v in features.sent]
    assert emitted, "the windows of the host with the right clock closed"
    expected: Counter[tuple[str, float]] = Counter()
    for s in good:
        for p in s.procs:
            expected[(p.tenant, window_start(s.ts, WINDOW_S))] += 1
    closed = {w.window_start for w in emitted}
    assert max(closed) + WINDOW_S <= good[-1].ts, "nothing closed past the true time"
    for w in emitted:  # the fast host's samples are all in windows 200 s later
        assert w.samples == expected[(w.tenant, w.window_start)], (w.tenant, w.window_start)


async def test_a_duplicate_never_moves_progress() -> None:
    updates = FakeTopic(2)
    ingest = _ingest(updates, FakeTable())
    snaps = make_snapshots(hosts=1, ticks=3)
    await ingest.on_snapshots([_event(i, s, s.ts) for i, s in enumerate(snaps)])
    progress = ingest._source_ts[0]
    dup = msgspec.structs.replace(snaps[1], ts=snaps[-1].ts + 100.0)  # seq 1 again, later stamp
    sent_before = len(updates.sent)
    await ingest.on_snapshots([_event(3, dup, snaps[-1].ts + 100.0)])
    assert ingest._source_ts[0] == progress
    assert len(updates.sent) == sent_before
    assert ingest.stats.duplicates == 1


async def test_without_a_trustworthy_record_time_the_workers_clock_bounds_event_time() -> None:
    """A topic with producer timestamps lets a host with a wrong clock skew both its
    snapshot and its record: the worker's own clock bounds them too."""
    import time

    updates, dead = FakeTopic(2), FakeTopic()
    ingest = _ingest(updates, FakeTable(), deadletters=dead)
    now = time.time()
    (snap,) = make_snapshots(hosts=1, ticks=1, t0=now)
    future = msgspec.structs.replace(snap, ts=now + 86_400.0)
    # record stamped by the same wrong clock, and a record with no timestamp at all
    await ingest.on_snapshots([_event(0, future, now + 86_400.0)])
    await ingest.on_snapshots([_event(1, msgspec.structs.replace(future, seq=1), 0.0)])
    letters = [schema.decode(v, schema.DeadLetter) for _, _, v in dead.sent]
    assert [d.reason for d in letters] == ["clock_skew", "clock_skew"]
    assert all("the worker's clock" in d.error for d in letters)
    assert 0 not in ingest._source_ts  # no progress moved
    await ingest.on_snapshots([_event(2, msgspec.structs.replace(snap, seq=2), now)])
    assert ingest._source_ts[0] == snap.ts  # a snapshot of now is taken
    # a record of the old message format has no timestamp (-1 ms): the worker's clock
    await ingest.on_snapshots([_event(3, msgspec.structs.replace(snap, seq=3), -0.001)])
    assert len(dead.sent) == 2 and ingest.stats.snapshots == 2


async def test_processing_latency_is_measured_in_one_clock_on_a_replay() -> None:
    """Windows of 2023 closed now: their latency is the worker's processing time, not the
    years between their event time and the wall clock."""
    from dprobe.sinks.worker_stats import WorkerStats
    from dprobe.streams.deadletter import DeadLetters
    from dprobe.streams.state.window_agg import WindowSettings
    from dprobe.streams.windows import Windows
    from tests.streams.test_batch_semantics import _event as update

    updates = FakeTopic(1)
    ingest = _ingest(updates, FakeTable())
    snaps = make_snapshots(hosts=2, ticks=40)  # event time 2023-11-14
    await ingest.on_snapshots([_event(i, s, s.ts) for i, s in enumerate(snaps)])
    stats = WorkerStats()
    stage = Windows(
        table=FakeTable(), features_topic=FakeTopic(), window=WindowSettings(window_s=10.0),
        stats=stats, sources=1, deadletter=DeadLetters(FakeTopic(), stats),
    )  # fmt: skip
    await stage.on_updates([update("u", 0, i, v) for i, (_, _, v) in enumerate(updates.sent)])
    assert stats.windows_emitted > 0
    assert stats.delay.count == stats.windows_emitted
    assert 0 <= stats.delay.total < 5.0 * stats.delay.count


async def test_late_data_is_counted_and_logged_once_a_minute_with_the_reason(
    caplog: Any,
) -> None:
    from dprobe.sinks.worker_stats import WorkerStats
    from dprobe.streams import codec
    from dprobe.streams.deadletter import DeadLetters
    from dprobe.streams.state.window_agg import Partial, WindowSettings
    from dprobe.streams.windows import Windows
    from tests.streams.test_batch_semantics import _event as update

    stats = WorkerStats()
    stage = Windows(
        table=FakeTable(), features_topic=FakeTopic(), window=WindowSettings(window_s=10.0),
        stats=stats, sources=1, deadletter=DeadLetters(FakeTopic(), stats),
    )  # fmt: skip

    def partial(seq: int, ts: float) -> bytes:
        return codec.encode_partials([Partial(
            tenant="vc-a", window_start=10.0 * (ts // 10.0), host="h1", seq=seq, ts=ts,
            samples=1, instance_s=1.0, gpu_s=1.0, util_sum=1.0, levels=(1, 0, 0, 0),
            weighted_s=0.3,
        )])  # fmt: skip

    wm = codec.encode_watermark(codec.SourceWatermark(source=0, ts=1_000.0))
    values = [partial(1, 500.0), wm, partial(2, 100.0), partial(3, 101.0), partial(4, 102.0)]
    with caplog.at_level("WARNING", logger="dprobe.streams.windows"):
        await stage.on_updates([update("u", 0, i, v) for i, v in enumerate(values)])
    assert stats.late_partials == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "already closed" in lines[0] and "host h1" in lines[0]


async def test_a_job_event_far_ahead_of_its_record_is_a_dead_letter_and_not_forwarded() -> None:
    """Job events move a window partition's event time too (alone where no samples topic
    reports yet): one stamped a day ahead would make every later snapshot late."""
    updates, dead = FakeTopic(2), FakeTopic()
    ingest = _ingest(updates, FakeTable(), deadletters=dead)
    t = 1_700_000_000.0

    def job(offset: int, ts: float, record_ts: float) -> Any:
        ev = schema.JobEvent(ts=ts, event="submit", job=f"j{offset}", tenant="vc-a", gpus=8)
        message = SimpleNamespace(topic="jobs", partition=0, offset=offset, timestamp=record_ts)
        return SimpleNamespace(value=schema.encode(ev), message=message)

    await ingest.on_job_events(
        [job(0, t, t + 0.5), job(1, t + 86_400.0, t + 1.0), job(2, t + 200.0, t + 1.0)]
    )
    forwarded = [codec.decode_update(v) for _, _, v in updates.sent]
    assert [(e.job, e.ts) for e in forwarded] == [("j0", t), ("j2", t + 200.0)]  # within 300 s
    (letter,) = [schema.decode(v, schema.DeadLetter) for _, _, v in dead.sent]
    assert (letter.reason, letter.source_topic, letter.offset) == ("clock_skew", "jobs", 1)
    assert "ahead of its record's clock" in letter.error
    assert ingest.stats.job_events == 2


async def test_a_host_restarted_inside_a_long_window_counts_both_halves_of_it() -> None:
    """A collector whose state was wiped starts again from seq 0 more than 300 s after its
    last snapshot: in a 10-minute window, the snapshots before and after the restart all
    count (the suspected first one is lost), as a plain count of them says."""
    from dprobe.sinks.worker_stats import WorkerStats
    from dprobe.streams.deadletter import DeadLetters
    from dprobe.streams.ingest import Ingest
    from dprobe.streams.state.window_agg import WindowSettings
    from dprobe.streams.windows import Windows
    from tests.streams.test_batch_semantics import _event as update

    window = WindowSettings(window_s=600.0, grace_s=5.0)
    t0 = 1_700_000_400.0  # a window start
    (first,) = make_snapshots(hosts=1, ticks=1, t0=t0)
    before = [msgspec.structs.replace(first, seq=5_000 + i, ts=t0 + i) for i in range(10)]
    after = [msgspec.structs.replace(first, seq=i, ts=t0 + 311.0 + i) for i in range(200)]
    tail = [msgspec.structs.replace(first, seq=200 + i, ts=t0 + 600.0 + 10 * i) for i in range(2)]
    snaps = before + after + tail
    stats = WorkerStats()
    updates = FakeTopic(1)
    ingest = Ingest(
        hosts_table=FakeTable(), updates_topic=updates,
        deadletter=DeadLetters(FakeTopic(), stats), window=window, stats=stats,
        max_message_bytes=1 << 20, update_partitions=1,
    )  # fmt: skip
    events = [_event(i, s, s.ts) for i, s in enumerate(snaps)]
    for i in range(0, len(events), 16):
        await ingest.on_snapshots(events[i : i + 16])
    assert (stats.resets, stats.duplicates) == (1, 0)
    features = FakeTopic()
    stage = Windows(
        table=FakeTable(), features_topic=features, window=window, stats=stats, sources=1,
        deadletter=DeadLetters(FakeTopic(), stats),
    )  # fmt: skip
    await stage.on_updates([update("u", p, i, v) for i, (p, _, v) in enumerate(updates.sent)])
    windows = [schema.decode_window(v) for _, _, v in features.sent]
    counted = before + after[1:]  # the suspected first snapshot after the restart is lost
    for tenant in {p.tenant for s in counted for p in s.procs}:
        [w] = [w for w in windows if w.tenant == tenant and w.window_start == t0]
        assert w.samples == sum(1 for s in counted for p in s.procs if p.tenant == tenant)
        assert w.lost_snapshots == 1


async def test_a_scheduler_whose_clock_runs_ahead_does_not_make_other_job_events_late() -> None:
    """Where job events alone drive time (no telemetry), one stamped a little ahead of
    its record (within ``max_clock_skew_s``) moves event time only up to its record's
    time, as a snapshot does: the other schedulers' events that follow are not late."""
    features = FakeTopic()
    stage = _windows(features, FakeTable())
    t = 1_700_000_000.0

    def update(offset: int, value: bytes, record_ts: float) -> Any:
        message = SimpleNamespace(topic="updates", partition=0, offset=offset, timestamp=record_ts)
        return SimpleNamespace(value=value, message=message)

    def job(offset: int, tenant: str, ts: float, record_ts: float) -> Any:
        ev = schema.JobEvent(ts=ts, event="submit", job=f"j{offset}", tenant=tenant, gpus=8)
        return update(offset, codec.encode_job(ev), record_ts)

    empty = codec.encode_watermark(codec.SourceWatermark(source=0, ts=0.0))
    await stage.on_updates(
        [
            update(0, empty, t),
            job(1, "vc-a", t, t),
            job(2, "vc-b", t + 250.0, t + 1.0),  # its scheduler's clock is 250 s ahead
            job(3, "vc-a", t + 2.0, t + 2.0),
            job(4, "vc-a", t + 40.0, t + 40.0),
        ]
    )
    assert stage.stats.late_job_events == 0
    ends = {schema.decode_window(v).window_end for _, _, v in features.sent}
    assert ends and max(ends) <= t + 40.0


async def test_a_job_event_stamped_ahead_is_held_back_even_when_forwarded_late() -> None:
    """The update that forwards a job event carries its jobs record's time, so a worker
    that reads the jobs topic an hour behind (a backlog) still holds an event stamped
    ahead of its record back to that record's time: no other scheduler's event is late."""
    updates = FakeTopic(1)
    ingest = _ingest(updates, FakeTable())
    t = 1_700_000_000.0

    def job(offset: int, tenant: str, ts: float, record_ts: float) -> Any:
        ev = schema.JobEvent(ts=ts, event="submit", job=f"j{offset}", tenant=tenant, gpus=8)
        message = SimpleNamespace(topic="jobs", partition=0, offset=offset, timestamp=record_ts)
        return SimpleNamespace(value=schema.encode(ev), message=message)

    jobs = [
        job(0, "vc-a", t, t),
        job(1, "vc-b", t + 250.0, t + 1.0),  # its scheduler's clock is 250 s ahead
        job(2, "vc-a", t + 2.0, t + 2.0),
        job(3, "vc-a", t + 40.0, t + 40.0),
    ]
    await ingest.on_job_events(jobs)  # read now, long after they were written
    # the one stamped ahead carries its record's time; the others the send's own time
    assert updates.timestamps == [None, t + 1.0, None, None]

    features = FakeTopic()
    stage = _windows(features, FakeTable())
    empty = codec.encode_watermark(codec.SourceWatermark(source=0, ts=0.0))
    late = t + 3600.0  # when a worker an hour behind forwarded them
    records = [(empty, t)] + [
        (v, late if ts is None else ts)
        for (_, _, v), ts in zip(updates.sent, updates.timestamps, strict=True)
    ]
    await stage.on_updates(
        [
            SimpleNamespace(
                value=v,
                message=SimpleNamespace(topic="updates", partition=0, offset=i, timestamp=ts),
            )
            for i, (v, ts) in enumerate(records)
        ]
    )
    assert stage.stats.late_job_events == 0
    ends = {schema.decode_window(v).window_end for _, _, v in features.sent}
    assert ends and max(ends) <= t + 40.0
