"""`dprobe events --group --plans` commits the plans it printed without a new record (a
plan held back behind an older one that never completed and expired) before it stops, so
the next run does not print them again."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from dprobe.commands import events
from dprobe.config import KafkaSettings
from dprobe.schema import encode
from dprobe.sinks.plan_order import PlanAssembler
from tests.sinks.test_plan_order import _event as _plain_event

TOPIC = "h.scaling-events"


def _event(*args: Any) -> Any:
    import msgspec

    return msgspec.structs.replace(_plain_event(*args), time="2025-11-30T05:20:00Z")


TP = TopicPartition(TOPIC, 0)


class _Consumer:
    """What ``_tail`` uses of AIOKafkaConsumer: one batch of records, then none."""

    def __init__(self, records: list[bytes], commits: list[dict[Any, int]]) -> None:
        self._batches = [[SimpleNamespace(offset=i, value=v) for i, v in enumerate(records)]]
        self.commits = commits
        self._listener: Any = None

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def topics(self) -> set[str]:
        return {TOPIC}

    def subscribe(self, topics: list[str], listener: Any = None) -> None:
        self._listener = listener
        if listener is not None:
            listener.on_partitions_assigned({TP})

    def assignment(self) -> set[TopicPartition]:
        return {TP}

    async def position(self, tp: TopicPartition) -> int:
        return 0

    async def committed(self, tp: TopicPartition) -> int:
        return 0  # the group has an offset: no start to commit

    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]:
        if self._batches:
            return {TP: self._batches.pop(0)}
        await asyncio.sleep(0.02)
        return {}

    async def commit(self, offsets: dict[Any, int]) -> None:
        self.commits.append(dict(offsets))


def _run(
    monkeypatch: pytest.MonkeyPatch, records: list[bytes], **more: Any
) -> list[dict[Any, int]]:
    import aiokafka

    commits: list[dict[Any, int]] = []
    monkeypatch.setattr(aiokafka, "AIOKafkaConsumer", lambda **kw: _Consumer(records, commits))
    quick: Callable[[], PlanAssembler] = lambda: PlanAssembler(max_age_s=0.2)  # noqa: E731
    monkeypatch.setattr(events, "PlanAssembler", quick)
    given = {"timeout": 1.0, "max_events": None, **more}
    args = argparse.Namespace(group="g", json=True, plans=True, from_beginning=True, **given)
    assert asyncio.run(events._tail(KafkaSettings(topic_prefix="h."), args)) == 0
    return commits


# plan 1 never completes (one of its two events); plan 2, complete, waits behind it until
# plan 1 expires and goes out then, with no new record
RECORDS = [
    encode(_event("a1", 1, "vc-a", 8, 16)),
    encode(_event("b1", 2, "vc-b", 16, 8)),
    encode(_event("b2", 2, "vc-c", 8, 16)),
]


def test_plans_printed_after_an_older_one_expired_are_committed_at_the_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    commits = _run(monkeypatch, RECORDS)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2  # plan 2's two events
    assert commits[0] == {TP: 0}  # after the batch: plan 1 still held
    assert commits[-1] == {TP: len(RECORDS)}  # what was printed, and the plan dropped


def test_max_events_reached_by_such_a_plan_commits_it_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    commits = _run(monkeypatch, RECORDS, timeout=30.0, max_events=1)
    assert len(capsys.readouterr().out.splitlines()) == 2  # the whole plan that reached 1
    assert commits[-1] == {TP: len(RECORDS)}
