"""Guarded fetches: the consumer's thread is asked with a copy of the active partitions as
they are when the request is made, and records the main thread will not hand over (their
partition left the live set, or the flow stopped, while the request waited) are withheld
and their partitions sought back to the first of them; nothing is lost, nothing skipped."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import faust
from aiokafka.structs import TopicPartition
from faust.types import TP

from dprobe.config import WorkerSettings
from dprobe.streams.fetch_guard import FetchGuardConsumer, Record, split_unwanted
from tests.streams.helpers import unstarted_worker_app

SAMPLES = TopicPartition("samples", 1)
CHANGELOG = TopicPartition("hosts-changelog", 3)


def _batch(first: int, n: int) -> list[Record]:
    return [Record(offset) for offset in range(first, first + n)]


class _FakeKafkaConsumer:
    """aiokafka's consumer as far as seeking back goes: an assignment and positions."""

    def __init__(self, assigned: set[TopicPartition]) -> None:
        self.assigned = assigned
        self.sought: dict[TopicPartition, int] = {}

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        assert isinstance(tp, TopicPartition)  # aiokafka refuses anything else
        self.sought[tp] = offset


@contextmanager
def _guarded(assigned: set[TopicPartition]) -> Iterator[tuple[Any, _FakeKafkaConsumer]]:
    """A FetchGuardConsumer of a faust app made in the running loop, whose thread's
    requests are answered by the test and whose Kafka consumer is a fake (no broker)."""
    app = faust.App("guard-test", broker="kafka://127.0.0.1:1", web_enabled=False)
    app.transport.Consumer = FetchGuardConsumer
    consumer = app.consumer
    kafka = _FakeKafkaConsumer(assigned)

    async def call_thread(fn: Any, *args: Any) -> Any:
        await asyncio.sleep(0)  # another hop, as the real one takes
        return await fn(*args)

    consumer._thread.call_thread = call_thread
    consumer._thread._ensure_consumer = lambda: kafka
    try:
        yield consumer, kafka
    finally:
        consumer._thread.thread_loop.close()


def test_split_keeps_wanted_partitions_and_names_where_the_others_start() -> None:
    records = {SAMPLES: _batch(240, 3), CHANGELOG: _batch(0, 6), TopicPartition("x", 0): []}
    kept, unwanted = split_unwanted(records, lambda tp: tp == SAMPLES)
    assert kept == {SAMPLES: records[SAMPLES]}
    assert unwanted == {CHANGELOG: 0}  # an empty batch has nowhere to go back to


def test_the_request_carries_a_copy_taken_when_it_is_made() -> None:
    async def main() -> None:
        with _guarded({SAMPLES, CHANGELOG}) as (consumer, kafka):
            live = {TP("samples", 1), TP("hosts-changelog", 3)}
            asked: list[set[TP]] = []

            async def getmany(partitions: set[TP], wait_s: float) -> dict:
                asked.append(partitions)
                live.clear()  # a rebalance pauses everything while the request waits
                return {}

            consumer._thread.getmany = getmany
            consumer.resume_flow()
            assert await consumer._getmany(live, 1.0) == {}
            assert asked[0] is not live
            assert asked[0] == {TP("samples", 1), TP("hosts-changelog", 3)}
            assert kafka.sought == {}  # nothing came back, nothing to seek

    asyncio.run(main())


def test_records_of_a_partition_paused_during_the_request_are_sought_back() -> None:
    async def main() -> None:
        with _guarded({SAMPLES, CHANGELOG}) as (consumer, kafka):
            live = {TP("samples", 1), TP("hosts-changelog", 3)}

            async def getmany(partitions: set[TP], wait_s: float) -> dict:
                live.discard(TP("hosts-changelog", 3))  # paused while it waited
                return {SAMPLES: _batch(240, 3), CHANGELOG: _batch(2, 4)}

            consumer._thread.getmany = getmany
            consumer.resume_flow()
            got = await consumer._getmany(live, 1.0)
            assert got == {SAMPLES: _batch(240, 3)}
            assert kafka.sought == {CHANGELOG: 2}  # read again from its first withheld record

    asyncio.run(main())


def test_a_flow_stopped_during_the_request_withholds_everything() -> None:
    async def main() -> None:
        with _guarded({SAMPLES, CHANGELOG}) as (consumer, kafka):
            live = {TP("samples", 1), TP("hosts-changelog", 3)}

            async def getmany(partitions: set[TP], wait_s: float) -> dict:
                consumer.stop_flow()  # a rebalance began
                return {SAMPLES: _batch(240, 3), CHANGELOG: _batch(0, 6)}

            consumer._thread.getmany = getmany
            consumer.resume_flow()
            assert await consumer._getmany(live, 1.0) == {}
            assert kafka.sought == {SAMPLES: 240, CHANGELOG: 0}

    asyncio.run(main())


def test_a_change_while_seeking_back_is_seen_before_records_are_handed_over() -> None:
    async def main() -> None:
        with _guarded({SAMPLES, CHANGELOG}) as (consumer, kafka):
            live = {TP("samples", 1), TP("hosts-changelog", 3)}

            async def getmany(partitions: set[TP], wait_s: float) -> dict:
                live.discard(TP("hosts-changelog", 3))
                return {SAMPLES: _batch(240, 3), CHANGELOG: _batch(0, 6)}

            async def call_thread(fn: Any, *args: Any) -> Any:
                consumer.stop_flow()  # the flow stops while the first seek is on its way
                return await fn(*args)

            consumer._thread.getmany = getmany
            consumer._thread.call_thread = call_thread
            consumer.resume_flow()
            assert await consumer._getmany(live, 1.0) == {}
            assert kafka.sought == {CHANGELOG: 0, SAMPLES: 240}

    asyncio.run(main())


def test_a_partition_no_longer_assigned_is_not_sought() -> None:
    async def main() -> None:
        with _guarded({SAMPLES}) as (consumer, kafka):  # the changelog moved elsewhere
            live = {TP("samples", 1)}

            async def getmany(partitions: set[TP], wait_s: float) -> dict:
                consumer.stop_flow()
                return {SAMPLES: _batch(240, 1), CHANGELOG: _batch(0, 6)}

            consumer._thread.getmany = getmany
            consumer.resume_flow()
            assert await consumer._getmany(live, 1.0) == {}
            assert kafka.sought == {SAMPLES: 240}  # aiokafka would refuse the other

    asyncio.run(main())


def test_wanted_records_pass_untouched() -> None:
    async def main() -> None:
        with _guarded({SAMPLES, CHANGELOG}) as (consumer, kafka):
            live = {TP("samples", 1), TP("hosts-changelog", 3)}
            records = {SAMPLES: _batch(240, 3), CHANGELOG: _batch(0, 6)}

            async def getmany(partitions: set[TP], wait_s: float) -> dict:
                return records

            consumer._thread.getmany = getmany
            consumer.resume_flow()
            assert await consumer._getmany(live, 1.0) == records
            assert kafka.sought == {}

    asyncio.run(main())


def test_the_worker_consumes_through_the_guarded_consumer(tmp_path: Path) -> None:
    with unstarted_worker_app(WorkerSettings(data_dir=tmp_path)) as built:
        assert isinstance(built.app.consumer, FetchGuardConsumer)
