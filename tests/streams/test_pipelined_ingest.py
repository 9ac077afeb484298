"""The ingest stage's pipelined acknowledgement, without a broker.

The worker folds batch k+1 while batch k's partials are on the way; a batch's records
are acknowledged to faust (so their offsets may be committed) only once its partials and
its sequence-state writes were delivered, batches complete in read order, and a batch
whose outputs fail to leave is never acknowledged (the worker exits).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from dprobe import schema
from dprobe.streams import codec
from dprobe.streams.delivery import DeliveryFailed
from dprobe.streams.ingest import hold_acks
from tests.streams.helpers import make_snapshots
from tests.streams.test_batch_semantics import UPDATE_PARTITIONS, FakeTable, FakeTopic, _ingest


class FakeMessage:
    """faust's reference counting: the final ``ack`` marks the offset committable."""

    def __init__(self, partition: int, offset: int, committed: list[int], key: bytes) -> None:
        self.partition, self.offset, self.key = partition, offset, key
        self.tp = ("samples", partition)
        self.refcount = 1  # the conductor's reference for the one stream
        self.acked = False
        self._committed = committed

    def incref(self) -> None:
        self.refcount += 1

    def ack(self) -> bool:
        if self.acked:
            return False
        self.refcount = max(self.refcount - 1, 0)
        if self.refcount == 0:
            self.acked = True
            self._committed.append(self.offset)
            return True
        return False


def _events(snaps: list[schema.HostSnapshot], first: int, committed: list[int]) -> list[Any]:
    sensors = SimpleNamespace(on_message_out=lambda *a: None)
    out = []
    for i, snap in enumerate(snaps):
        message = FakeMessage(0, first + i, committed, snap.host.encode())
        out.append(
            SimpleNamespace(
                value=schema.encode(snap),
                message=message,
                ack=message.ack,
                app=SimpleNamespace(sensors=sensors),
            )
        )
    return out


def _stream_moves_on(events: list[Any]) -> None:
    """What ``take_events`` does with a batch when the agent asks for the next one."""
    for event in events:
        event.ack()


async def test_the_next_batch_is_folded_while_the_last_ones_outputs_are_on_the_way() -> None:
    updates = FakeTopic(UPDATE_PARTITIONS, deliver=False)
    hosts = FakeTable()
    ingest = _ingest(updates, hosts)
    committed: list[int] = []
    snaps = make_snapshots(hosts=2, ticks=4)
    first, second = _events(snaps[:4], 0, committed), _events(snaps[4:], 4, committed)

    await ingest.submit(first, release=hold_acks(first))
    _stream_moves_on(first)
    sent_first = len(updates.sent)
    await ingest.submit(second, release=hold_acks(second))  # returns: not blocked on delivery
    _stream_moves_on(second)
    assert len(updates.sent) > sent_first, "the second batch was folded and sent"
    assert committed == [], "acknowledged before its partials were delivered"
    assert hosts.changelog == [], "sequence state written before its partials were delivered"

    for fut in updates.futures[sent_first:]:  # the second batch's partials arrive first
        fut.set_result(None)
    await asyncio.sleep(0.01)
    assert committed == [] and hosts.changelog == [], "completed out of read order"

    for fut in updates.futures[:sent_first]:
        if not fut.done():
            fut.set_result(None)
    await ingest.drain()
    assert committed == list(range(8))
    # each host's state is written twice, the first batch's before the second's
    assert [key for _, key, _ in hosts.changelog] == [b"host-0", b"host-1"] * 2
    last = {key: codec.loads(value)["seq"] for _, key, value in hosts.changelog}
    assert last == {b"host-0": 3, b"host-1": 3}


async def test_a_snapshot_repeated_while_its_first_copy_is_on_the_way_is_dropped() -> None:
    updates = FakeTopic(UPDATE_PARTITIONS, deliver=False)
    ingest = _ingest(updates, FakeTable())
    committed: list[int] = []
    snaps = make_snapshots(hosts=1, ticks=2)
    first = _events(snaps, 0, committed)
    await ingest.submit(first, release=hold_acks(first))
    sent = len(updates.sent)
    again = _events(snaps, 2, committed)  # a redelivery, read before the first completed
    await ingest.submit(again, release=hold_acks(again))
    assert len(updates.sent) == sent, "a duplicate was forwarded again"
    assert ingest.stats.duplicates == 2
    for fut in updates.futures:
        fut.set_result(None)
    _stream_moves_on(first + again)
    await ingest.drain()
    assert committed == [0, 1, 2, 3]


async def test_a_batch_whose_partials_fail_is_never_acknowledged() -> None:
    updates = FakeTopic(UPDATE_PARTITIONS, deliver=False)
    ingest = _ingest(updates, FakeTable())
    failures: list[BaseException] = []
    ingest.on_failure = failures.append
    committed: list[int] = []
    snaps = make_snapshots(hosts=1, ticks=4)
    first, second = _events(snaps[:2], 0, committed), _events(snaps[2:], 2, committed)
    await ingest.submit(first, release=hold_acks(first))
    sent_first = len(updates.sent)
    await ingest.submit(second, release=hold_acks(second))
    _stream_moves_on(first + second)
    updates.futures[0].set_exception(RuntimeError("delivery timed out"))
    for fut in updates.futures[1:]:
        fut.set_result(None)
    for _ in range(500):  # both batches' failures are reported a few loop turns apart
        if len(failures) >= 2:
            break
        await asyncio.sleep(0.01)
    assert sent_first > 0
    assert committed == [], "a batch after the failed one was acknowledged"
    assert len(failures) == 2 and all(isinstance(f, DeliveryFailed) for f in failures)
    assert all(isinstance(f.__cause__, RuntimeError) for f in failures)


async def test_no_more_than_depth_batches_are_on_the_way() -> None:
    updates = FakeTopic(UPDATE_PARTITIONS, deliver=False)
    ingest = _ingest(updates, FakeTable())
    ingest.depth = 2
    committed: list[int] = []
    snaps = make_snapshots(hosts=1, ticks=4)
    batches = [_events([snap], i, committed) for i, snap in enumerate(snaps)]
    for batch in batches[:2]:
        await ingest.submit(batch, release=hold_acks(batch))
    blocked = asyncio.create_task(ingest.submit(batches[2], release=hold_acks(batches[2])))
    await asyncio.sleep(0.01)
    assert not blocked.done(), "a third batch was let go with two on the way (depth 2)"
    for fut in updates.futures:
        fut.set_result(None)
    await blocked
    await ingest.submit(batches[3], release=hold_acks(batches[3]))
    for fut in updates.futures:
        if not fut.done():
            fut.set_result(None)
    for batch in batches:
        _stream_moves_on(batch)
    await ingest.drain()
    assert committed == [0, 1, 2, 3]
