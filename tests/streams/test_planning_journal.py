"""The planning stage keeps its state in its table's changelog: a worker that takes the
planning partition over, at any record, from the changelog the last owner wrote, plans
exactly what an uninterrupted one does, although the offsets of the records since the
last checkpoint were committed before the handover."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from aiokafka.errors import KafkaTimeoutError

from dprobe import schema
from dprobe.models.checkpoint import save_state
from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.schema import decode_scaling_event
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec, table_io
from dprobe.streams.plan_order import PlanOrder
from dprobe.streams.planning import DeliveryFailed, Planning
from dprobe.streams.planning_store import PlanningStore
from tests.models.test_plan_loop import _interleave, _partition_logs
from tests.streams.test_batch_semantics import FakeEvents, FakeTable


def _order() -> PlanOrder:
    return PlanOrder(PlanLoop(LastValue(), PlanLoopSettings(horizon_s=60.0)), partitions=3)


def _planning(
    table: FakeTable,
    events: FakeEvents,
    *,
    chunk_bytes: int = 512,
    legacy: Path | None = None,
    checkpoint_s: float = 0.0,
) -> Planning:
    """A planning stage whose clock moves 60 s per record (so ``checkpoint_s`` counts
    records: 0 checkpoints after every plan)."""
    ticks = iter(range(0, 10**9, 60))
    return Planning(
        make_order=_order,
        store=PlanningStore(table, chunk_bytes=chunk_bytes),
        events=events,
        stats=WorkerStats(),
        legacy_checkpoint=legacy,
        checkpoint_s=checkpoint_s,
        clock=lambda: float(next(ticks)),
    )


def _records() -> list[bytes]:
    out = []
    for kind, body in _interleave(_partition_logs(30), random.Random(4)):
        if kind == "window":
            out.append(codec.encode_plan_window(body))  # type: ignore[arg-type]
        else:
            out.append(codec.encode_progress(codec.WindowProgress(*body)))  # type: ignore[misc]
    return out


def _ids(topic: FakeEvents) -> list[str]:
    return [decode_scaling_event(v).event_id for _, _, v in topic.sent]


async def _uninterrupted(records: list[bytes]) -> FakeEvents:
    whole = FakeEvents()
    planning = _planning(FakeTable(), whole)
    for offset, raw in enumerate(records):
        await planning.on_message(raw, offset)
    assert whole.sent
    return whole


@pytest.mark.parametrize("checkpoint_s", [0.0, 600.0, 1e9])  # every plan, some, only the first
@pytest.mark.parametrize("kind", ["window", "progress", "plan"])
async def test_a_new_owner_resumes_from_the_changelog_the_last_one_wrote(
    kind: str, checkpoint_s: float
) -> None:
    records = _records()
    whole = await _uninterrupted(records)

    table, events = FakeTable(), FakeEvents()
    first = _planning(table, events, checkpoint_s=checkpoint_s)
    # The handover comes right after a record of this kind, whose offset is committed:
    # a window waiting for its end, a progress that planned nothing, a progress that
    # completed a plan (and so a checkpoint).
    starts = {"window": codec.PLAN_WINDOW, "progress": codec.PROGRESS}
    n = 0
    for handover, raw in enumerate(records):
        before = len(events.sent)
        await first.on_message(raw, handover)
        planned = len(events.sent) > before
        wanted = planned if kind == "plan" else raw.startswith(starts[kind]) and not planned
        if handover > len(records) // 2 and wanted:
            break
        n += 1
    assert n < len(records) - 1, "no handover point of that kind"
    if checkpoint_s > 0:  # the journal spans plans: the new owner runs them again
        head = first.store.head()
        assert head is not None and head.offset < handover - 10
    second = _planning(FakeTable.recovered(table.changelog), events, checkpoint_s=checkpoint_s)
    for offset in range(handover + 1, len(records)):
        await second.on_message(records[offset], offset)
    # the whole run's events: the same ids, in the same order, none twice, none missing
    assert _ids(events) == _ids(whole)


async def test_records_the_checkpoint_covers_are_skipped_when_read_again() -> None:
    """The commit lags the checkpoint: the new owner reads records the checkpoint holds."""
    records = _records()
    whole = await _uninterrupted(records)
    table, events = FakeTable(), FakeEvents()
    first = _planning(table, events)
    for offset, raw in enumerate(records[: len(records) // 2]):
        await first.on_message(raw, offset)
    second = _planning(FakeTable.recovered(table.changelog), events)
    redo = len(records) // 4  # the last committed offset, long before the handover
    for offset in range(redo, len(records)):
        await second.on_message(records[offset], offset)
    seen = set(_ids(events))
    assert seen == set(_ids(whole))
    assert len(_ids(events)) >= len(_ids(whole))  # repeats carry the same ids (dropped)


async def test_the_changelog_holds_one_checkpoint_and_only_the_journal_after_it() -> None:
    table = FakeTable()
    planning = _planning(table, FakeEvents(), chunk_bytes=256)
    records = _records()
    for offset, raw in enumerate(records):
        await planning.on_message(raw, offset)
    head = planning.store.head()
    assert head is not None and head.chunks > 1  # the state spans several records
    live = FakeTable.recovered(table.changelog).data  # what compaction keeps
    chunks = [k for k in live if k.startswith(b"c|")]
    journal = sorted(int(k[2:]) for k in live if k.startswith(b"j|"))
    assert len(chunks) == head.chunks
    assert all(k.split(b"|")[1] == b"%020d" % head.gen for k in chunks)
    assert journal == list(range(head.offset + 1, len(records)))
    assert [k for k in live if k.startswith(b"h|")] == [b"h|%020d" % head.offset]
    assert max(len(v) for v in live.values()) <= 256


async def test_a_corrupt_checkpoint_starts_planning_fresh_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = FakeTable()
    planning = _planning(table, FakeEvents())
    for offset, raw in enumerate(_records()[:200]):
        await planning.on_message(raw, offset)
    head = planning.store.head()
    assert head is not None
    broken = FakeTable.recovered(table.changelog)
    broken.data[b"c|%020d|%06d" % (head.gen, 0)] = b"not a checkpoint"
    with caplog.at_level("WARNING", logger="dprobe.streams.planning"):
        second = _planning(broken, FakeEvents())
        await second.on_message(_records()[200], 200)
    assert second.loop.forecaster.forecast("vc-a", [60.0]) == {60.0: (0.0, 0.0)}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "digest" in warnings[0] and "fresh" in warnings[0]


@pytest.mark.parametrize("rebalance", [False, True])
async def test_a_worker_upgraded_from_local_files_starts_from_them_once(
    tmp_path: Path, rebalance: bool
) -> None:
    """An older worker kept the state in <data_dir>/plan-loop.ckpt and its journal; a
    rebalance before the first checkpoint in the table loses nothing either (the state is
    loaded from the local files again, then the table's journal since the upgrade)."""
    records = _records()
    whole = await _uninterrupted(records)
    events = FakeEvents()
    old = _order()
    half = len(records) // 2
    for raw in records[:half]:  # what the older worker planned and saved
        message = codec.decode_planning(raw)
        if isinstance(message, codec.WindowProgress):
            for ev in old.on_progress(message.partition, message.upto):
                events.sent.append((0, ev.tenant.encode(), schema.encode(ev)))
        else:
            old.on_window(message)
    legacy = tmp_path / "plan-loop.ckpt"
    save_state(old.state_dict(), legacy)
    table = FakeTable()
    planning = _planning(table, events, legacy=legacy, checkpoint_s=1e9 if rebalance else 0.0)
    first_plan = None
    for offset in range(half, len(records)):
        if rebalance and offset == half + 3:
            planning.revoke()  # a rebalance that leaves planning here, before any plan
        before = len(events.sent)
        await planning.on_message(records[offset], offset)
        if first_plan is None and len(events.sent) > before:
            first_plan = offset
    assert first_plan is not None and first_plan > half + 3
    assert _ids(events) == _ids(whole)
    assert not legacy.exists() and (tmp_path / "plan-loop.ckpt.migrated").exists()
    assert planning.store.head() is not None


async def test_an_event_not_delivered_leaves_the_record_unacknowledged() -> None:
    """The agent ends the process on DeliveryFailed instead of acknowledging the record."""
    records = _records()
    events = FakeEvents(deliver=False)
    planning = _planning(FakeTable(), events)
    for offset, raw in enumerate(records):
        pending = asyncio.ensure_future(planning.on_message(raw, offset))
        await asyncio.sleep(0)
        if not events.futures:
            await pending
            continue
        events.futures[0].set_exception(KafkaTimeoutError())
        with pytest.raises(DeliveryFailed, match=f"offset {offset}: .* scaling event"):
            await pending
        return
    raise AssertionError("no plan")


async def test_a_journaled_record_that_fails_again_is_skipped_and_the_rest_taken_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = _records()
    broken = 40  # a record whose handling raised (a bug): it stays in the journal
    without = FakeEvents()  # the reference: the same records, that one never applied
    reference = _planning(FakeTable(), without)
    for offset, raw in enumerate(records):
        if offset != broken:
            await reference.on_message(raw, offset)
    table, events = FakeTable(), FakeEvents()
    first = _planning(table, events, checkpoint_s=1e9)
    for offset, raw in enumerate(records[:120]):
        if offset == broken:
            await table_io.put(table, 0, b"j|%020d" % offset, b"T{not a window")
            continue
        await first.on_message(raw, offset)
    second = _planning(FakeTable.recovered(table.changelog), events, checkpoint_s=1e9)
    with caplog.at_level("ERROR", logger="dprobe.streams.planning"):
        for offset in range(120, len(records)):
            await second.on_message(records[offset], offset)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"planning: journaled record at offset {broken} fails again; skipped"
    ]
    assert _ids(events) == _ids(without)


async def test_a_rebalance_that_leaves_planning_here_reloads_nothing() -> None:
    """Revoked and assigned again with no other worker planning in between (a worker
    joined or left the group): the loop goes on as it was, without loading the checkpoint
    or replaying the journal, and plans what an uninterrupted run plans."""
    records = _records()
    whole = await _uninterrupted(records)
    table, events = FakeTable(), FakeEvents()
    planning = _planning(table, events, checkpoint_s=600.0)
    loads = []
    load = planning.store.load
    planning.store.load = lambda head: loads.append(head) or load(head)  # type: ignore[method-assign]
    for offset, raw in enumerate(records):
        if offset in (len(records) // 3, len(records) // 2):
            order = planning.order
            planning.revoke()
            await planning.on_message(raw, offset)
            assert planning.order is order, "the loop was rebuilt"
        else:
            await planning.on_message(raw, offset)
    assert loads == []
    assert _ids(events) == _ids(whole)


async def test_a_worker_that_planning_comes_back_to_after_another_planned_reloads() -> None:
    """Another worker took the records after this one's last and wrote a checkpoint (it
    then failed before committing, so this worker reads on from its own last record): the
    loop is loaded from the table again, and the whole run plans what an uninterrupted
    one does."""
    records = _records()
    whole = await _uninterrupted(records)
    table, events = FakeTable(), FakeEvents()
    first = _planning(table, events)  # checkpoints after every plan
    half = len(records) // 2
    for offset in range(half):
        await first.on_message(records[offset], offset)
    other = _planning(FakeTable.recovered(table.changelog), events)
    for offset in range(half, len(records) * 3 // 4):
        await other.on_message(records[offset], offset)
    assert other.store.head() != first.store.head(), "the other worker checkpointed"
    first.revoke()
    first.store.table = FakeTable.recovered(other.store.table.changelog)  # faust's rebuild
    order = first.order
    for offset in range(half, len(records)):
        await first.on_message(records[offset], offset)
    assert first.order is not order, "the loop was loaded again"
    assert _ids(events) == _ids(whole)


async def test_a_former_owner_waking_from_a_stall_cannot_put_the_state_back() -> None:
    """The owner stalls; another worker takes planning over and checkpoints; the former
    owner wakes, takes one more record and writes a checkpoint that covers fewer records
    (after the new owner's in the changelog). A third worker that takes over next loads
    the newest state, and the run plans what an uninterrupted one does."""
    records = _records()
    whole = await _uninterrupted(records)
    events = FakeEvents()
    stalled_table = FakeTable()
    stalled = _planning(stalled_table, events)  # checkpoints after every plan
    third_of = len(records) // 3
    for offset in range(third_of):
        await stalled.on_message(records[offset], offset)
    before_stall = len(stalled_table.changelog)
    new_owner = _planning(FakeTable.recovered(stalled_table.changelog), events)
    handed = 2 * third_of
    for offset in range(third_of, handed):
        await new_owner.on_message(records[offset], offset)
    # the former owner wakes and plans on with what it had (until it learns it lost the
    # partition): its writes land in the changelog after the new owner's
    late_plan = -1
    for offset in range(third_of, handed):
        if await _events_of(stalled, records[offset], offset):
            late_plan = offset
            break
    stale_head = stalled.store.head()
    assert stale_head is not None and stale_head.offset == late_plan < handed - 1
    changelog = (
        stalled_table.changelog[:before_stall]
        + new_owner.store.table.changelog
        + stalled_table.changelog[before_stall:]
    )
    third = _planning(FakeTable.recovered(changelog), events)
    assert third.store.head() == new_owner.store.head()
    for offset in range(handed, len(records)):
        await third.on_message(records[offset], offset)
    assert list(dict.fromkeys(_ids(events))) == _ids(whole)  # in order, after dedupe by id


async def _events_of(planning: Planning, raw: bytes, offset: int) -> list[bytes]:
    """The events ``planning`` sends for one record."""
    before = len(planning.events.sent)
    await planning.on_message(raw, offset)
    return [v for _, _, v in planning.events.sent[before:]]


async def test_a_table_written_by_an_earlier_version_is_resumed() -> None:
    """Workers before keyed heads wrote the head only under ``head``: a worker that takes
    planning over from such a table resumes from it."""
    records = _records()
    whole = await _uninterrupted(records)
    table, events = FakeTable(), FakeEvents()
    first = _planning(table, events, checkpoint_s=600.0)
    half = len(records) // 2
    for offset in range(half):
        await first.on_message(records[offset], offset)
    older = [(p, k, v) for p, k, v in table.changelog if not k.startswith(b"h|")]
    second = _planning(FakeTable.recovered(older), events, checkpoint_s=600.0)
    assert second.store.head() == first.store.head() is not None
    for offset in range(half, len(records)):
        await second.on_message(records[offset], offset)
    assert _ids(events) == _ids(whole)


@pytest.mark.parametrize("checkpoint_s", [0.0, 600.0, 1e9])
async def test_the_marks_workers_leave_when_they_join_change_no_plan(checkpoint_s: float) -> None:
    """A WorkerStarted mark (streams/group_window.py) passes through planning and, after a
    handover, through the new owner's replay of the journal, without changing what is
    planned."""
    records = _records()
    whole = await _uninterrupted(records)
    mark = codec.encode_started(codec.WorkerStarted(window_s=60.0, at=1.0))
    assert codec.decode_planning(mark) == codec.WorkerStarted(window_s=60.0, at=1.0)
    marked = [r for i, raw in enumerate(records) for r in ((mark, raw) if i % 7 == 0 else (raw,))]
    table, events = FakeTable(), FakeEvents()
    first = _planning(table, events, checkpoint_s=checkpoint_s)
    handover = len(marked) * 2 // 3
    for offset, raw in enumerate(marked[: handover + 1]):
        await first.on_message(raw, offset)
    head = first.store.head()
    if checkpoint_s > 0:  # the new owner replays a journal that holds marks
        assert head is not None and head.offset < handover - 10
        assert mark in marked[head.offset + 1 : handover + 1]
    second = _planning(FakeTable.recovered(table.changelog), events, checkpoint_s=checkpoint_s)
    for offset in range(handover + 1, len(marked)):
        await second.on_message(marked[offset], offset)
    assert _ids(events) == _ids(whole)
