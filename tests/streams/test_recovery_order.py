"""Why a restart under traffic lost one snapshot, without a broker (faust's real objects,
the broker calls replaced by recorders).

After table recovery faust resumes the source partitions and awaits the seek to their
committed offsets while the flow is on, so prefetched records reach the agents during
the seek; those still queued when the flow resumes are cleared, counted as read, and
committed over. The worker's recovery (:mod:`dprobe.streams.recovery`) keeps the flow
off until the seek is done. ``tests/streams/test_restart_under_traffic.py`` runs the
same on a real broker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from faust.tables.recovery import Recovery
from faust.types import TP

from dprobe.config import WorkerSettings
from dprobe.streams.app import WorkerApp
from dprobe.streams.recovery import SeekFirstRecovery
from tests.streams.helpers import unstarted_worker_app


@pytest.fixture
async def worker(tmp_path: Path) -> AsyncIterator[WorkerApp]:
    """The worker's faust app, never started (no broker)."""
    with unstarted_worker_app(WorkerSettings(data_dir=tmp_path)) as built:
        yield built


async def _complete_recovery(worker: WorkerApp, recovery: Any) -> list[tuple[str, bool]]:
    """Run ``recovery``'s completion step as faust does after reading the changelogs (the
    flow is on then); for each source-partition step, whether records could flow to the
    agents at that moment (the fetcher hands them over whenever the flow is on)."""
    app = worker.app
    consumer = app.consumer
    samples = {TP(worker.topics.samples, p) for p in range(4)}
    steps: list[tuple[str, bool]] = []

    def flowing() -> bool:
        return bool(consumer.flow_active and app.flow_control.is_active())

    def resume_partitions(tps: Any) -> None:
        steps.append(("resume", flowing()))

    async def perform_seek() -> None:
        steps.append(("seek", flowing()))

    async def fetcher_running() -> None:
        return None

    consumer.assignment = lambda: set(samples)  # type: ignore[method-assign]
    consumer.resume_partitions = resume_partitions  # type: ignore[method-assign]
    consumer.perform_seek = perform_seek  # type: ignore[method-assign]
    app._fetcher.maybe_start = fetcher_running  # type: ignore[method-assign]
    app.flow_control.resume()  # as the changelog recovery left it
    consumer.resume_flow()
    await recovery.on_recovery_completed(app.consumer_generation_id)
    steps.append(("after", flowing()))
    return steps


async def test_faust_recovery_lets_records_flow_while_the_seek_is_pending(
    worker: WorkerApp,
) -> None:
    app = worker.app
    stock = Recovery(app, app.tables, beacon=app.tables.beacon, loop=app.loop)
    steps = await _complete_recovery(worker, stock)
    assert steps == [("resume", True), ("seek", True), ("after", True)]


async def test_worker_recovery_holds_the_flow_until_the_partitions_are_seeked(
    worker: WorkerApp,
) -> None:
    assert isinstance(worker.app.tables.recovery, SeekFirstRecovery)
    steps = await _complete_recovery(worker, worker.app.tables.recovery)
    assert steps == [("resume", False), ("seek", False), ("after", True)]


@pytest.mark.parametrize(("acked", "commit"), [([310, 311], 312), ([311, 312], None)])
async def test_faust_commits_over_one_record_it_never_acked(
    worker: WorkerApp, acked: list[int], commit: int | None
) -> None:
    """Why a cleared record is never read again: offset 309 is the next to read and was
    never acknowledged, yet once 310 and 311 are, faust (faust-streaming 0.15.3) commits
    312; only a hole of two or more stops it."""
    consumer = worker.app.consumer
    tp = TP(worker.topics.samples, 1)
    consumer._committed_offset[tp] = 309
    consumer._acked[tp] = list(acked)
    assert consumer._new_offset(tp) == commit
