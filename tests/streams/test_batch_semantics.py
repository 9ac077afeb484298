"""The worker's batch logic without a broker: in-memory stand-ins for faust's tables and
topics (the integration tests run the same code on a real broker).

- the ingest stage writes a host's sequence state only after the partials it accounts for
  were delivered (so a crash can never make a replay drop undelivered snapshots);
- the windows a log of updates produces do not depend on how it is cut into batches, and a
  "crash" that delivered only part of a batch's table writes, followed by recovery from
  the changelog and a replay of the uncommitted records, changes nothing;
- both equal the plain-Python reference of the snapshots.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprobe import schema
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.ingest import Ingest
from dprobe.streams.ranked_table import advancing, offset_rank
from dprobe.streams.state.window_agg import WindowSettings
from dprobe.streams.windows import Windows
from tests.streams.helpers import (
    assert_window_matches,
    closing_snapshots,
    make_snapshots,
    reference_windows,
)

WINDOW_S = 10.0
UPDATE_PARTITIONS = 2


class FakeTable:
    """``data`` plus the changelog writes faust would send, in order."""

    key_serializer = value_serializer = "raw"

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.changelog: list[tuple[int | None, bytes, bytes | None]] = []
        self.changelog_topic = self

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def __contains__(self, key: bytes) -> bool:
        return key in self.data

    async def send(self, *, key: bytes, value: bytes | None, partition: int, **_: Any) -> Any:
        self.changelog.append((partition, key, value))
        return None

    @classmethod
    def recovered(
        cls, changelog: list[tuple[int | None, bytes, bytes | None]], *, ranked: bool = False
    ) -> FakeTable:
        """The table a restarted worker rebuilds from these changelog records (``ranked``:
        as a :class:`~dprobe.streams.ranked_table.RankedTable` does, else last one wins)."""
        table = cls()
        if ranked:
            events = [SimpleNamespace(partition=p, key=k, value=v) for p, k, v in changelog]
            kept = advancing(events, table.data.get, offset_rank)
            changelog = [(e.partition, e.key, e.value) for e in kept]
        for partition, key, value in changelog:
            table.changelog.append((partition, key, value))
            if value is None:
                table.data.pop(key, None)
            else:
                table.data[key] = value
        return table


class FakeTopic:
    """Records sends as ``(partition, key, value)``; delivery is a future the test controls."""

    def __init__(self, partitions: int = 1, *, deliver: bool = True) -> None:
        self.partitions = partitions
        self.deliver = deliver
        self.sent: list[tuple[int, bytes, bytes]] = []
        self.timestamps: list[float | None] = []  # each send's record timestamp, if given
        self.futures: list[asyncio.Future[None]] = []
        self.accepting = asyncio.Event()  # cleared: send() itself waits (a full buffer)
        self.accepting.set()

    async def send(
        self,
        *,
        key: bytes,
        value: bytes,
        partition: int | None = None,
        timestamp: float | None = None,
    ) -> Any:
        await self.accepting.wait()
        if partition is None:
            partition = sum(key) % self.partitions
        self.sent.append((partition, key, value))
        self.timestamps.append(timestamp)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.deliver:
            fut.set_result(None)
        self.futures.append(fut)
        return fut


class FakeEvents(FakeTopic):
    """A :class:`FakeTopic` as the planning stage's event sink
    (:class:`~dprobe.streams.event_fence.FencedEvents`): a transaction is the sends, then
    waiting for each delivery; ``claims`` counts the producer (re)starts."""

    def __init__(self, *, deliver: bool = True) -> None:
        super().__init__(deliver=deliver)
        self.claims = 0
        self.current = False

    async def claim(self) -> None:
        if not self.current:
            self.claims += 1
            self.current = True

    def release(self) -> None:
        self.current = False

    async def send_all(self, records: list[tuple[bytes, bytes]]) -> None:
        if records:
            await self.claim()
        futures = [await self.send(key=k, value=v) for k, v in records]
        for fut in futures:
            await fut


def _event(topic: str, partition: int, offset: int, value: bytes, key: bytes | None = None) -> Any:
    return SimpleNamespace(
        value=value,
        message=SimpleNamespace(topic=topic, partition=partition, offset=offset, key=key),
    )


def _ingest(
    updates: FakeTopic,
    hosts: FakeTable,
    *,
    deadletters: FakeTopic | None = None,
    source_idle_s: float = 30.0,
    quiet_probe: Callable[[list[int]], Awaitable[set[int]]] | None = None,
) -> Ingest:
    stats = WorkerStats()
    return Ingest(
        hosts_table=hosts,
        updates_topic=updates,
        deadletter=DeadLetters(deadletters or FakeTopic(), stats),
        window=WindowSettings(window_s=WINDOW_S, grace_s=2.0, source_idle_s=source_idle_s),
        stats=stats,
        max_message_bytes=1 << 20,
        update_partitions=UPDATE_PARTITIONS,
        quiet_probe=quiet_probe,
    )


def _windows(features: FakeTopic, table: FakeTable) -> Windows:
    stats = WorkerStats()
    return Windows(
        table=table,
        features_topic=features,
        window=WindowSettings(window_s=WINDOW_S, grace_s=2.0),
        stats=stats,
        sources=1,
        deadletter=DeadLetters(FakeTopic(), stats),
    )


def _snapshot_events(snaps: list[schema.HostSnapshot]) -> list[Any]:
    return [_event("samples", 0, i, schema.encode(s), s.host.encode()) for i, s in enumerate(snaps)]


async def test_host_state_is_written_only_after_its_partials_are_delivered() -> None:
    updates = FakeTopic(UPDATE_PARTITIONS, deliver=False)
    hosts = FakeTable()
    ingest = _ingest(updates, hosts)
    events = _snapshot_events(make_snapshots(hosts=2, ticks=3))
    task = asyncio.create_task(ingest.on_snapshots(events))
    await asyncio.sleep(0.01)
    assert updates.sent, "partials were sent"
    assert not task.done()
    assert hosts.changelog == [], "sequence state written before its partials were delivered"
    for fut in updates.futures:
        fut.set_result(None)
    await task
    assert {key for _, key, _ in hosts.changelog} == {b"host-0", b"host-1"}


async def test_host_state_records_the_offset_it_accounts_for() -> None:
    hosts = FakeTable()
    ingest = _ingest(FakeTopic(UPDATE_PARTITIONS), hosts)
    snaps = make_snapshots(hosts=2, ticks=3)
    events = _snapshot_events(snaps)
    await ingest.on_snapshots(events[:4])
    await ingest.on_snapshots(events[4:] + events[:1])  # the last one is a redelivery
    # each host's state ranks by the highest offset it accounts for (ranked_table.py),
    # which a redelivery from further back does not lower
    last = {snaps[i].host.encode(): e.message.offset for i, e in enumerate(events)}
    assert {k: codec.loads(v)["off"] for k, v in hosts.data.items()} == last


async def _updates_log(snaps: list[schema.HostSnapshot], batch: int) -> list[Any]:
    """The tenant-updates log the ingest stage writes for ``snaps`` read in batches."""
    updates = FakeTopic(UPDATE_PARTITIONS)
    ingest = _ingest(updates, FakeTable())
    events = _snapshot_events(snaps)
    for i in range(0, len(events), batch):
        await ingest.on_snapshots(events[i : i + batch])
    return [
        _event("updates", partition, offset, value)
        for offset, (partition, _, value) in enumerate(updates.sent)
    ]


async def _windows_of(
    log: list[Any], cuts: list[int], crash: tuple[int, int, float] | None
) -> list[bytes]:
    """Feed ``log`` to a window stage in batches ending at ``cuts``.

    ``crash=(offset, behind, kept)``: the process dies after the batch holding ``offset``.
    Its last commit was ``behind`` batches earlier (faust flushes the changelog before
    each commit); of the changelog writes after that commit, only the share ``kept`` was
    delivered (in order). A new process recovers the table from the changelog and
    replays the log from the committed offset.
    """
    features = FakeTopic()
    table = FakeTable()
    stage = _windows(features, table)
    bounds = sorted({0, *[c for c in cuts if 0 < c < len(log)], len(log)})
    written_at: list[int] = []  # changelog length at the start of each batch
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        written_at.append(len(table.changelog))
        await stage.on_updates(log[a:b])
        if crash is not None and a <= crash[0] < b:
            committed = max(0, i - crash[1])
            flushed = written_at[committed]
            keep = flushed + round(crash[2] * (len(table.changelog) - flushed))
            table = FakeTable.recovered(table.changelog[:keep])
            stage = _windows(features, table)
            await stage.on_updates(log[bounds[committed] : b])
    return [value for _, _, value in features.sent]


def _by_window(values: list[bytes]) -> dict[tuple[str, float], bytes]:
    out: dict[tuple[str, float], bytes] = {}
    for raw in values:
        w = schema.decode_window(raw)
        key = (w.tenant, w.window_start)
        assert out.setdefault(key, raw) == raw, f"window {key} emitted twice, differently"
    return out


SNAPS = make_snapshots(hosts=3, ticks=35, seed=3)
ALL = SNAPS + closing_snapshots(SNAPS, seconds=15)


@settings(max_examples=60, deadline=None)
@given(
    ingest_batch=st.integers(1, 40),
    cuts=st.lists(st.integers(1, 400), max_size=12),
    crash=st.one_of(
        st.none(), st.tuples(st.integers(0, 300), st.integers(0, 3), st.floats(0.0, 1.0))
    ),
)
def test_windows_do_not_depend_on_batches_or_replays(
    ingest_batch: int, cuts: list[int], crash: tuple[int, int, float] | None
) -> None:
    async def run() -> tuple[dict[tuple[str, float], bytes], dict[tuple[str, float], bytes]]:
        one_by_one = _by_window(await _windows_of(await _updates_log(ALL, 1), [], None))
        log = await _updates_log(ALL, ingest_batch)
        return one_by_one, _by_window(await _windows_of(log, cuts, crash))

    one_by_one, got = asyncio.run(run())
    assert got == one_by_one
    ref = reference_windows(ALL, WINDOW_S)
    assert set(reference_windows(SNAPS, WINDOW_S)) <= set(got) <= set(ref)
    for key, raw in got.items():
        assert_window_matches(schema.decode_window(raw), ref[key], WINDOW_S)


async def _after_a_stalled_owner(log: list[Any], c1: int, c2: int, c3: int) -> list[bytes]:
    """Windows of ``log`` when its partition changes hands while its owner stalls.

    Owner A commits ``log[:c1]``, then stalls in the middle of ``log[c1:c2]``: the group
    gives the partition to B, which restores the table, reads ``log[c1:c3]`` and commits.
    A wakes up and its writes for its batch reach the changelog after B's. Then C takes
    the partition, restores the table and reads the rest.
    """
    features = FakeTopic()
    a = _windows(features, FakeTable())
    await a.on_updates(log[:c1])
    committed = list(a.table.changelog)
    await a.on_updates(log[c1:c2])
    late = a.table.changelog[len(committed) :]
    b = _windows(features, FakeTable.recovered(committed, ranked=True))
    for i in range(c1, c3, 7):
        await b.on_updates(log[i : min(i + 7, c3)])
    c = _windows(features, FakeTable.recovered(b.table.changelog + late, ranked=True))
    await c.on_updates(log[c3:])
    return [value for _, _, value in features.sent]


@settings(max_examples=25, deadline=None)
@given(c1=st.integers(0, 250), stall=st.integers(1, 60), ahead=st.integers(1, 120))
def test_a_stalled_owners_late_writes_do_not_undo_the_next_owners(
    c1: int, stall: int, ahead: int
) -> None:
    async def run() -> tuple[dict[tuple[str, float], bytes], dict[tuple[str, float], bytes]]:
        log = await _updates_log(ALL, 5)
        c2 = min(c1 + stall, len(log))
        c3 = min(c2 + ahead, len(log))
        one_by_one = _by_window(await _windows_of(await _updates_log(ALL, 1), [], None))
        return one_by_one, _by_window(await _after_a_stalled_owner(log, c1, c2, c3))

    one_by_one, got = asyncio.run(run())
    assert got == one_by_one


async def test_a_partition_is_never_reported_idle_while_its_batch_is_on_the_way() -> None:
    updates = FakeTopic(UPDATE_PARTITIONS)
    deadletters = FakeTopic()
    ingest = _ingest(updates, FakeTable(), deadletters=deadletters, source_idle_s=0.0)
    snaps = make_snapshots(hosts=1, ticks=4)
    await ingest.on_snapshots(_snapshot_events(snaps[:2]))
    deadletters.accepting.clear()  # the dead-letter send of the next batch hangs
    third = _event("samples", 0, 2, schema.encode(snaps[2]), snaps[2].host.encode())
    batch = [third, _event("samples", 0, 3, b"{")]
    task = asyncio.create_task(ingest.on_snapshots(batch))
    await asyncio.sleep(0.01)  # blocked on the dead letter, the valid snapshot not sent yet
    before = len(updates.sent)
    await ingest.report_idle_sources({0: 4}, newest_elsewhere=snaps[-1].ts + 100)
    assert len(updates.sent) == before, "reported idle while its records were in flight"
    deadletters.accepting.set()
    await task
    await ingest.report_idle_sources({0: 4}, newest_elsewhere=snaps[-1].ts + 100)
    assert len(updates.sent) > before  # read to its end and idle: now it is reported


async def test_nothing_is_emitted_below_the_progress_already_reported() -> None:
    from dprobe.streams import codec

    features = FakeTopic()
    reported: list[tuple[int, float]] = []

    async def on_progress(partition: int, upto: float) -> None:
        reported.append((partition, upto))

    stage = _windows(features, FakeTable())
    stage.on_progress = on_progress
    wm = codec.encode_watermark(codec.SourceWatermark(source=0, ts=1000.0))
    await stage.on_updates([_event("updates", 0, 0, wm)])
    assert reported == [(0, 990.0)]  # watermark 998 (grace 2): every window ending <= 990
    late = make_snapshots(hosts=1, ticks=1, t0=900.0)[0]  # a partial of window [900, 910)
    parts = _ingest(FakeTopic(UPDATE_PARTITIONS), FakeTable())._observe(late, 0, {}, offset=0)
    later = codec.encode_watermark(codec.SourceWatermark(source=0, ts=2000.0))
    await stage.on_updates(
        [_event("updates", 0, 1, codec.encode_partials(parts)), _event("updates", 0, 2, later)]
    )
    assert stage.stats.late_partials == len(parts) > 0
    assert features.sent == [], "a window below the reported progress was emitted"
    assert reported == [(0, 990.0), (0, 1990.0)]


async def test_a_partition_restored_for_longer_than_the_idle_time_is_not_taken_for_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker takes over samples partition 0 with a backlog; restoring its tables takes
    longer than ``source_idle_s``. Its idle clock starts when records can flow, so the
    backlog is not made late by an idle report at another partition's progress."""
    clock = [1000.0]
    monkeypatch.setattr("dprobe.streams.ingest.time.monotonic", lambda: clock[0])
    updates = FakeTopic(UPDATE_PARTITIONS)
    ingest = _ingest(updates, FakeTable(), source_idle_s=30.0)
    newest = 1_700_000_000.0
    for _ in range(10):  # 45 s of restore: nothing reported, whatever the clock says
        await ingest.report_idle_sources({0: 10_000}, newest_elsewhere=newest, flowing=False)
        clock[0] += 4.5
    assert updates.sent == []
    await ingest.report_idle_sources({0: 10_000}, newest_elsewhere=newest)  # flowing now
    clock[0] += 29.0
    await ingest.report_idle_sources({0: 10_000}, newest_elsewhere=newest)
    assert updates.sent == [], "reported idle before source_idle_s of flowing"
    clock[0] += 1.0  # nothing read for 30 s while records could flow: idle after all
    await ingest.report_idle_sources({0: 10_000}, newest_elsewhere=newest)
    assert {p for p, _, _ in updates.sent} == set(range(UPDATE_PARTITIONS))


async def test_an_empty_partition_is_reported_at_0_once_while_no_progress_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No samples partition has forwarded anything: one idle for ``source_idle_s`` is
    reported once at progress 0 (it holds nothing, so job events may drive time); once
    progress is known it is reported at that progress as before."""
    clock = [1000.0]
    monkeypatch.setattr("dprobe.streams.ingest.time.monotonic", lambda: clock[0])
    updates = FakeTopic(UPDATE_PARTITIONS)
    ingest = _ingest(updates, FakeTable(), source_idle_s=30.0)
    await ingest.report_idle_sources({0: 0})
    clock[0] += 29.0
    await ingest.report_idle_sources({0: 0})
    assert updates.sent == []
    clock[0] += 1.0
    await ingest.report_idle_sources({0: 0})
    await ingest.report_idle_sources({0: 0})  # told once
    told = [codec.decode_update(v) for _, _, v in updates.sent]
    assert told == [codec.SourceWatermark(source=0, ts=0.0)] * UPDATE_PARTITIONS
    await ingest.report_idle_sources({0: 0}, newest_elsewhere=1_700_000_000.0)
    told = [codec.decode_update(v) for _, _, v in updates.sent[UPDATE_PARTITIONS:]]
    assert told == [codec.SourceWatermark(source=0, ts=1_700_000_000.0)] * UPDATE_PARTITIONS


def _source(update: bytes) -> int:
    """The samples partition an idle report on the updates topic is about."""
    watermark = codec.decode_update(update)
    assert isinstance(watermark, codec.SourceWatermark)
    return watermark.source


async def test_a_partition_taken_over_quiet_is_idle_at_once_and_a_busy_one_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Partitions 0 and 1 are taken over in a rebalance. Kafka says partition 1 has been
    quiet for ``source_idle_s`` already (read to its end, no newer record): once the
    probe, which runs in the background, has answered, it is reported idle at the next
    tick, while partition 0, which Kafka does not call quiet, waits ``source_idle_s`` of
    its own. The probe is asked once per assignment, and never while records cannot
    flow."""
    clock = [1000.0]
    monkeypatch.setattr("dprobe.streams.ingest.time.monotonic", lambda: clock[0])
    asked: list[list[int]] = []

    async def probe(partitions: list[int]) -> set[int]:
        asked.append(sorted(partitions))
        return {1} & set(partitions)

    updates = FakeTopic(UPDATE_PARTITIONS)
    ingest = _ingest(updates, FakeTable(), source_idle_s=30.0, quiet_probe=probe)
    newest = 1_700_000_000.0
    assigned = {0: 0, 1: 0}
    await ingest.report_idle_sources(assigned, newest_elsewhere=newest, flowing=False)
    await asyncio.sleep(0)
    assert asked == [] and updates.sent == []
    await ingest.report_idle_sources(assigned, newest_elsewhere=newest)
    await asyncio.sleep(0)  # the probe answers
    assert asked == [[0, 1]]
    clock[0] += 1.0
    await ingest.report_idle_sources(assigned, newest_elsewhere=newest)
    assert {(p, _source(v)) for p, _, v in updates.sent} == {
        (k, 1) for k in range(UPDATE_PARTITIONS)
    }, "the quiet partition, and only it, is reported idle at once"
    sent = len(updates.sent)
    clock[0] += 28.0
    await ingest.report_idle_sources(assigned, newest_elsewhere=newest)
    assert len(updates.sent) == sent, "the partition not found quiet was reported early"
    clock[0] += 1.0
    await ingest.report_idle_sources(assigned, newest_elsewhere=newest)
    assert {_source(v) for _, _, v in updates.sent[sent:]} == {0}
    assert asked == [[0, 1]], "asked again for partitions it already holds"
    # revoked and assigned again: asked anew
    await ingest.report_idle_sources({}, newest_elsewhere=newest)
    await ingest.report_idle_sources({1: 0}, newest_elsewhere=newest + 10)
    await asyncio.sleep(0)
    assert asked == [[0, 1], [1]]


async def test_a_quiet_answer_for_a_partition_revoked_meanwhile_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe answers after partition 1 was revoked and assigned again: the answer is
    about the earlier assignment, so the new one is timed from its own start."""
    clock = [1000.0]
    monkeypatch.setattr("dprobe.streams.ingest.time.monotonic", lambda: clock[0])
    answer: asyncio.Future[set[int]] = asyncio.get_running_loop().create_future()
    asked: list[list[int]] = []

    async def probe(partitions: list[int]) -> set[int]:
        asked.append(sorted(partitions))
        return await answer

    updates = FakeTopic(UPDATE_PARTITIONS)
    ingest = _ingest(updates, FakeTable(), source_idle_s=30.0, quiet_probe=probe)
    newest = 1_700_000_000.0
    await ingest.report_idle_sources({1: 0}, newest_elsewhere=newest)
    await asyncio.sleep(0)
    clock[0] += 1.0
    await ingest.report_idle_sources({}, newest_elsewhere=newest)  # revoked
    clock[0] += 1.0
    await ingest.report_idle_sources({1: 0}, newest_elsewhere=newest)  # assigned again
    answer.set_result({1})
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    clock[0] += 1.0
    await ingest.report_idle_sources({1: 0}, newest_elsewhere=newest)
    assert updates.sent == [], "an answer about an earlier assignment was used"
    await asyncio.sleep(0)
    assert asked == [[1], [1]]  # the new assignment is asked about once the first is done
