"""Guarded fetches: the consumer's thread is asked with a copy of the active partitions as
they are when the request is made, and records the main thread will not hand over (their
partition left the live set, or the flow stopped, while the request waited) are withheld
and their partitions sought back to the first of them; nothing is lost, nothing skipped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka.structs import TopicPartition
from faust.types import TP

from dprobe.config import WorkerSettings
from dprobe.streams.fetch_guard import FetchGuardConsumer, split_unwanted
from tests.streams.helpers import bare_consumer, unstarted_worker_app

SAMPLES = TopicPartition("samples", 1)
CHANGELOG = TopicPartition("hosts-changelog", 3)


@dataclass(frozen=True)
class Record:
    """A fetched record as far as the guard reads one: its offset."""

    offset: int


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


Step = Callable[[Any, set[TP]], None]


def _fetch(
    assigned: set[TopicPartition],
    reply: dict[TopicPartition, list[Record]],
    during_fetch: Step = lambda consumer, live: None,
    during_seek: Step = lambda consumer, live: None,
) -> tuple[dict, dict[TopicPartition, int], list[set[TP]]]:
    """One guarded fetch of a FetchGuardConsumer (a faust app made in a fresh loop, no
    broker) over the live set of ``samples`` 1 and ``hosts-changelog`` 3, the flow on:
    the consumer's thread runs ``during_fetch`` and answers ``reply``; each seek back runs
    ``during_seek`` on its way to a fake Kafka consumer assigned ``assigned``. Returns
    what was handed over, what was sought back, and the sets the thread was asked for."""
    kafka = _FakeKafkaConsumer(assigned)
    asked: list[set[TP]] = []

    async def main() -> dict:
        live = {TP("samples", 1), TP("hosts-changelog", 3)}

        async def getmany(partitions: set[TP], wait_s: float) -> dict:
            asked.append(partitions)
            during_fetch(consumer, live)
            return reply

        async def call_thread(fn: Any, *args: Any) -> Any:
            during_seek(consumer, live)
            return await fn(*args)

        with bare_consumer(FetchGuardConsumer) as consumer:
            consumer._thread.getmany = getmany
            consumer._thread.call_thread = call_thread
            consumer._thread._ensure_consumer = lambda: kafka
            consumer.resume_flow()
            got: dict = await consumer._getmany(live, 1.0)
        assert asked[0] is not live  # a copy, not the set the main thread changes
        return got

    return asyncio.run(main()), kafka.sought, asked


def _pause_changelog(consumer: Any, live: set[TP]) -> None:
    live.discard(TP("hosts-changelog", 3))


def _stop_flow(consumer: Any, live: set[TP]) -> None:
    consumer.stop_flow()  # a rebalance began


def test_split_keeps_wanted_partitions_and_names_where_the_others_start() -> None:
    records = {SAMPLES: _batch(240, 3), CHANGELOG: _batch(0, 6), TopicPartition("x", 0): []}
    kept, unwanted = split_unwanted(records, lambda tp: tp == SAMPLES)
    assert kept == {SAMPLES: records[SAMPLES]}
    assert unwanted == {CHANGELOG: 0}  # an empty batch has nowhere to go back to


def test_the_request_carries_a_copy_taken_when_it_is_made() -> None:
    got, sought, asked = _fetch({SAMPLES, CHANGELOG}, {}, lambda consumer, live: live.clear())
    assert asked == [{TP("samples", 1), TP("hosts-changelog", 3)}]  # as it was, not emptied
    assert got == {} and sought == {}  # nothing came back, nothing to seek


def test_records_of_a_partition_paused_during_the_request_are_sought_back() -> None:
    reply = {SAMPLES: _batch(240, 3), CHANGELOG: _batch(2, 4)}
    got, sought, _ = _fetch({SAMPLES, CHANGELOG}, reply, _pause_changelog)
    assert got == {SAMPLES: _batch(240, 3)}
    assert sought == {CHANGELOG: 2}  # read again from its first withheld record


def test_a_flow_stopped_during_the_request_withholds_everything() -> None:
    reply = {SAMPLES: _batch(240, 3), CHANGELOG: _batch(0, 6)}
    got, sought, _ = _fetch({SAMPLES, CHANGELOG}, reply, _stop_flow)
    assert got == {}
    assert sought == {SAMPLES: 240, CHANGELOG: 0}


def test_a_change_while_seeking_back_is_seen_before_records_are_handed_over() -> None:
    # the flow stops while the changelog's seek is on its way: the samples go back too
    reply = {SAMPLES: _batch(240, 3), CHANGELOG: _batch(0, 6)}
    got, sought, _ = _fetch({SAMPLES, CHANGELOG}, reply, _pause_changelog, _stop_flow)
    assert got == {}
    assert sought == {CHANGELOG: 0, SAMPLES: 240}


def test_a_partition_no_longer_assigned_is_not_sought() -> None:
    # the changelog moved to another worker: aiokafka would refuse to seek it
    reply = {SAMPLES: _batch(240, 1), CHANGELOG: _batch(0, 6)}
    got, sought, _ = _fetch({SAMPLES}, reply, _stop_flow)
    assert got == {}
    assert sought == {SAMPLES: 240}


def test_wanted_records_pass_untouched() -> None:
    reply = {SAMPLES: _batch(240, 3), CHANGELOG: _batch(0, 6)}
    got, sought, _ = _fetch({SAMPLES, CHANGELOG}, reply)
    assert got == reply
    assert sought == {}


def test_the_worker_consumes_through_the_guarded_consumer(tmp_path: Path) -> None:
    with unstarted_worker_app(WorkerSettings(data_dir=tmp_path)) as built:
        assert isinstance(built.app.consumer, FetchGuardConsumer)
