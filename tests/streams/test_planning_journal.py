"""The planning stage keeps what arrived between two checkpoints: a worker killed while
windows wait for their end to be planned plans exactly what an uninterrupted one does,
although the offsets of those windows were committed before the kill."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.schema import decode_scaling_event
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec
from dprobe.streams.planning import Planning
from tests.models.test_plan_loop import _interleave, _partition_logs
from tests.streams.test_batch_semantics import FakeTopic


def _planning(tmp: Path, events: FakeTopic) -> Planning:
    loop = PlanLoop(LastValue(), PlanLoopSettings(horizon_s=60.0, window_partitions=3))
    return Planning(loop=loop, events_topic=events, stats=WorkerStats(), checkpoint=tmp / "ckpt")


def _records() -> list[bytes]:
    out = []
    for kind, body in _interleave(_partition_logs(30), random.Random(4)):
        if kind == "window":
            out.append(codec.encode_plan_window(body))  # type: ignore[arg-type]
        else:
            out.append(codec.encode_progress(codec.WindowProgress(*body)))  # type: ignore[misc]
    return out


async def test_a_killed_planner_takes_back_the_windows_it_had_not_planned(tmp_path: Path) -> None:
    records = _records()
    whole = FakeTopic()
    uninterrupted = _planning(tmp_path / "a", whole)
    for raw in records:
        await uninterrupted.on_message(raw)
    assert whole.sent

    events = FakeTopic()
    first = _planning(tmp_path / "b", events)
    # Kill right after a window record that waits for planning (not covered by a
    # checkpoint); the restarted worker resumes *after* it, as if its offset was committed.
    kill = next(
        i
        for i, raw in enumerate(records)
        if i > len(records) // 2 and raw.startswith(codec.PLAN_WINDOW)
    )
    for raw in records[: kill + 1]:
        await first.on_message(raw)
    second = _planning(tmp_path / "b", events)
    for raw in records[kill + 1 :]:
        await second.on_message(raw)
    got = {decode_scaling_event(v).event_id for _, _, v in events.sent}
    assert got == {decode_scaling_event(v).event_id for _, _, v in whole.sent}


def test_a_corrupt_checkpoint_starts_planning_fresh_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "ckpt").write_bytes(b"not a checkpoint")
    with caplog.at_level("WARNING", logger="dprobe.streams.planning"):
        planning = _planning(tmp_path, FakeTopic())
    assert planning.loop.forecaster.forecast("vc-a", [60.0]) == {60.0: (0.0, 0.0)}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "not a checkpoint" in warnings[0] and "fresh" in warnings[0]
