"""No record is acknowledged before its outputs, dead letters included, were delivered: a
delivery that fails becomes DeliveryFailed (the worker exits unacknowledged) instead of a
warning in the log while the record is committed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from dprobe import schema
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.delivery import DeliveryFailed
from tests.streams.helpers import make_snapshots
from tests.streams.test_batch_semantics import FakeTable, FakeTopic, _ingest

T = 1_700_000_000.0


def _record(topic: str, offset: int, value: bytes, key: bytes | None = None) -> Any:
    message = SimpleNamespace(topic=topic, partition=0, offset=offset, timestamp=T + 1.0, key=key)
    return SimpleNamespace(value=value, message=message)


def _job(offset: int) -> Any:
    ev = schema.JobEvent(ts=T, event="submit", job=f"j{offset}", tenant="vc-a", gpus=8)
    return _record("jobs", offset, schema.encode(ev))


async def test_a_samples_batch_with_a_dead_letter_is_released_only_once_it_was_delivered() -> None:
    dead = FakeTopic(deliver=False)
    ingest = _ingest(FakeTopic(2), FakeTable(), deadletters=dead)
    failures: list[BaseException] = []
    ingest.on_failure = failures.append
    released = asyncio.Event()
    (snap,) = make_snapshots(hosts=1, ticks=1, t0=T)
    first = _record("samples", 0, schema.encode(snap), snap.host.encode())
    batch = [first, _record("samples", 1, b"not json")]
    await ingest.submit(batch, release=released.set)
    await asyncio.sleep(0.01)
    assert len(dead.sent) == 1 and not released.is_set()  # the dead letter is on its way
    dead.futures[0].set_result(None)
    await ingest.drain()
    assert released.is_set() and failures == []

    # a dead letter that is never delivered fails its batch: not released
    released.clear()
    await ingest.submit([_record("samples", 2, b"{}")], release=released.set)
    dead.futures[1].set_exception(TimeoutError("broker away"))
    with pytest.raises(DeliveryFailed, match="not delivered"):
        await ingest.drain()
    assert not released.is_set()
    assert [type(e) for e in failures] == [DeliveryFailed]


async def test_a_batch_of_job_events_returns_only_once_every_send_was_delivered() -> None:
    updates, dead = FakeTopic(2, deliver=False), FakeTopic(deliver=False)
    ingest = _ingest(updates, FakeTable(), deadletters=dead)
    task = asyncio.create_task(ingest.on_job_events([_job(0), _record("jobs", 1, b"{"), _job(2)]))
    await asyncio.sleep(0.01)
    assert (len(updates.sent), len(dead.sent)) == (2, 1)
    assert not task.done()
    for fut in updates.futures + dead.futures:
        fut.set_result(None)
    await task

    task = asyncio.create_task(ingest.on_job_events([_job(3)]))
    await asyncio.sleep(0.01)
    updates.futures[-1].set_exception(TimeoutError("broker away"))
    with pytest.raises(DeliveryFailed, match="1 job event"):
        await task


async def test_a_dead_letter_not_delivered_is_delivery_failed() -> None:
    topic = FakeTopic(deliver=False)
    letters = DeadLetters(topic, WorkerStats())
    task = asyncio.create_task(
        letters.send(b"x", schema.SchemaError("bad", "invalid"), _job(7).message)
    )
    await asyncio.sleep(0.01)
    assert not task.done()  # waits for its delivery
    topic.futures[0].set_exception(TimeoutError("broker away"))
    with pytest.raises(DeliveryFailed, match=r"dead letter of jobs\[0\]@7"):
        await task
