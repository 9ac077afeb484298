"""A table restore never waits forever: an active changelog partition with records left
that gave the restore nothing for ``stall_s`` is sought back to the last offset the
restore applied, at most once per ``stall_s``; a partition that is moving, done, or a
restore that is not running is left alone; a seek refused by Kafka is logged, not raised."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import IllegalStateError
from faust.types import TP

from dprobe.config import WorkerSettings
from dprobe.streams.recovery import SeekFirstRecovery
from tests.streams.helpers import unstarted_worker_app

STUCK = TP("planner-hosts-changelog", 3)
MOVING = TP("planner-windows-changelog", 3)
DONE = TP("planner-windows-changelog", 1)
START = 1_000.0


def _restore(
    tmp_path: Path,
    steps: Callable[[SeekFirstRecovery, list[dict]], Any],
    seek_fails: bool = False,
) -> list[dict]:
    """Run ``steps(recovery, seeks)`` on the worker's recovery in a restore that began at
    START: STUCK got nothing (last applied offset -1, 6 left), MOVING got an event at
    START + 25 (applied up to 40 of 80), DONE is complete. Returns the seeks made."""
    seeks: list[dict] = []
    with unstarted_worker_app(WorkerSettings(data_dir=tmp_path)) as built:
        recovery = built.app.tables.recovery
        assert isinstance(recovery, SeekFirstRecovery)

        async def seek_wait(offsets: dict) -> None:
            seeks.append(dict(offsets))
            if seek_fails:
                raise IllegalStateError("not assigned")

        built.app.consumer.seek_wait = seek_wait
        recovery.in_recovery = True
        recovery._recovery_started_at = START
        recovery.active_highwaters.update({STUCK: 5, MOVING: 80, DONE: 12})
        recovery.active_offsets.update(Counter({STUCK: -1, MOVING: 40, DONE: 12}))
        recovery._active_events_received_at[MOVING] = START + 25
        asyncio.run(steps(recovery, seeks))
    return seeks


def test_a_stalled_partition_is_sought_back_once_per_stall(tmp_path: Path) -> None:
    async def steps(recovery: SeekFirstRecovery, seeks: list[dict]) -> None:
        assert await recovery.seek_back_stalled(START + 29) == {}  # not stalled yet
        assert await recovery.seek_back_stalled(START + 30) == {STUCK: 0}
        assert await recovery.seek_back_stalled(START + 45) == {}  # just sought back
        # MOVING's last event is 30 s old by now; STUCK stalls again
        assert await recovery.seek_back_stalled(START + 60) == {STUCK: 0, MOVING: 40}

    assert _restore(tmp_path, steps) == [{STUCK: 0}, {STUCK: 0, MOVING: 40}]


def test_nothing_is_sought_outside_a_restore(tmp_path: Path) -> None:
    async def steps(recovery: SeekFirstRecovery, seeks: list[dict]) -> None:
        recovery.in_recovery = False
        assert await recovery.seek_back_stalled(START + 600) == {}

    assert _restore(tmp_path, steps) == []


def test_a_refused_seek_is_logged_and_the_restore_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def steps(recovery: SeekFirstRecovery, seeks: list[dict]) -> None:
        assert await recovery.seek_back_stalled(START + 31) == {STUCK: 0}

    assert _restore(tmp_path, steps, seek_fails=True) == [{STUCK: 0}]
    assert "seeking back the stalled restore failed" in caplog.text
    assert "restore stalled" in caplog.text
