"""An end that fails to plan (a model bug) does not take the other ends of the same
progress record with it: their events are sent, the record becomes a dead letter, and a
worker that takes planning over from the journal arrives at the same state."""

from __future__ import annotations

import pytest

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.schema import LevelCounts, TenantWindow, decode_scaling_event
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec
from dprobe.streams.plan_order import PlanFailed, PlanOrder
from dprobe.streams.planning import Planning
from dprobe.streams.planning_store import PlanningStore
from tests.streams.test_batch_semantics import FakeEvents, FakeTable

W = 60.0
DEMAND = {"a": [8.0, 40.0, 40.0, 8.0], "b": [40.0, 8.0, 8.0, 40.0]}  # per window end


class FailsAt(LastValue):
    """Last value, except that forecasting fails once the model has learned ``bad_end``."""

    def __init__(self, bad_end: float | None) -> None:
        super().__init__()
        self.bad_end = bad_end
        self.latest = 0.0

    def learn_one(self, window):  # type: ignore[no-untyped-def]
        super().learn_one(window)
        self.latest = max(self.latest, window.window_end)

    def forecast(self, tenant, horizons):  # type: ignore[no-untyped-def]
        if self.latest == self.bad_end:
            raise ZeroDivisionError("a bug in the model")
        return super().forecast(tenant, horizons)


def _window(tenant: str, end: float) -> TenantWindow:
    run = DEMAND[tenant][int(end // W) - 1]
    return TenantWindow(
        tenant=tenant, window_start=end - W, window_end=end, hosts=1, gpus_busy=run,
        instances=run, util_sum=0.0, level_counts=LevelCounts(), effective_demand_gpus=run,
        pending_gpus=0.0, running_gpus=run,
    )  # fmt: skip


def _records() -> list[bytes]:
    windows = [_window(t, W * k) for k in (1, 2, 3, 4) for t in ("a", "b")]
    progress = codec.WindowProgress(0, 4 * W)  # one record completes all four ends
    return [*(codec.encode_plan_window(w) for w in windows), codec.encode_progress(progress)]


def _planning(bad_end: float | None, table: FakeTable, events: FakeEvents) -> Planning:
    def order() -> PlanOrder:
        settings = PlanLoopSettings(capacity_gpus=64, horizon_s=W)
        return PlanOrder(PlanLoop(FailsAt(bad_end), settings), partitions=1)

    return Planning(
        make_order=order,
        store=PlanningStore(table, chunk_bytes=4096),
        events=events,
        stats=WorkerStats(),
    )


def _ends(events: FakeEvents) -> list[float]:
    return sorted({decode_scaling_event(v).window_end for _, _, v in events.sent})


async def test_the_other_ends_of_the_record_are_planned_and_sent() -> None:
    clean = FakeEvents()
    planning = _planning(None, FakeTable(), clean)
    for offset, raw in enumerate(_records()):
        await planning.on_message(raw, offset)
    assert _ends(clean) == [W, 2 * W, 4 * W]  # demand moves at these ends

    events, table = FakeEvents(), FakeTable()
    planning = _planning(2 * W, table, events)
    *windows, progress = _records()
    for offset, raw in enumerate(windows):
        await planning.on_message(raw, offset)
    with pytest.raises(PlanFailed, match="1 window end") as failed:
        await planning.on_message(progress, len(windows))
    assert [end for end, _ in failed.value.failed] == [2 * W]
    # the ends before and after the failed one (at 3W the move that 2W did not make)
    assert _ends(events) == [W, 3 * W, 4 * W]
    assert planning.loop.planned_upto == 4 * W
    assert sum(planning.stats.scaling_events.values()) == len(events.sent)

    # a worker that takes planning over replays the journal: the same state, no resend
    successor_events = FakeEvents()
    successor = _planning(2 * W, table, successor_events)
    straggler = codec.encode_plan_window(_window("a", 4 * W))  # already learned: no change
    await planning.on_message(straggler, len(windows) + 1)
    await successor.on_message(straggler, len(windows) + 1)
    assert successor.order.state_dict() == planning.order.state_dict()
    assert successor_events.sent == []
