"""A checkpoint in the planning table that does not fit this worker's loop (a window
saved in it that today's schema refuses) is one warning and a fresh start, as the docs
promise, not a half-loaded loop and a dead-lettered record."""

from __future__ import annotations

import pytest

from dprobe.models.checkpoint import state_bytes
from dprobe.streams.planning_store import PlanningStore
from tests.streams.test_batch_semantics import FakeEvents, FakeTable
from tests.streams.test_planning_journal import _planning, _records


async def test_a_checkpoint_with_a_window_the_schema_refuses_starts_fresh(
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = _records()
    earlier = _planning(FakeTable(), FakeEvents())
    for offset, raw in enumerate(records[:150]):
        await earlier.on_message(raw, offset)
    state = earlier.order.state_dict()
    assert state["last"], "no window in the state"
    for window in state["last"].values():
        window["hosts"] = -1  # a window no TenantWindow decodes
    table = FakeTable()
    store = PlanningStore(table, chunk_bytes=512)
    await store.checkpoint(149, state_bytes(state))
    await store.journal(150, records[150])

    # the reference: a fresh start that takes the journal back
    fresh = _planning(FakeTable(), FakeEvents())
    for offset in (150, 151):
        await fresh.on_message(records[offset], offset)

    second = _planning(FakeTable.recovered(table.changelog), FakeEvents())
    with caplog.at_level("WARNING", logger="dprobe.streams.planning"):
        await second.on_message(records[151], 151)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "does not fit" in warnings[0] and "fresh" in warnings[0]
    assert second.order.state_dict() == fresh.order.state_dict()
