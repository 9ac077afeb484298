"""Samples partitions that a worker takes over and that have been quiet for long already.

A samples partition that no host writes to holds every window until the worker that reads
it reports it idle, after ``source_idle_s`` of forwarding nothing. A worker that takes
such a partition over in a rebalance has seen nothing of it yet, so by its own clock alone
it would wait ``source_idle_s`` anew, and every tenant's windows would wait with it. Kafka
knows better. The partition has been quiet for at least ``quiet_s`` when:

- nothing in it is left to read: the group's committed offset (or, where the group has
  none, the log's start) is at its end, so the last owner read everything; and
- no record in it is newer than ``quiet_s``: a lookup by time (``ListOffsets``) finds no
  record stamped at or after ``now - quiet_s``. The topics dprobe creates stamp records
  with the broker's clock (``LogAppendTime``), so this is the time the last record
  arrived; a topic with the producers' timestamps uses theirs.

Either lookup failing counts the partition as not quiet: the worker then waits
``source_idle_s`` as it would without them. The lookup by time compares the broker's
stamps with this machine's clock, so the two are assumed to agree to well within
``quiet_s`` (NTP).

Example (against a running broker; ``consumer`` a started ``AIOKafkaConsumer`` of the
worker's group)::

    quiet = await quiet_partitions(consumer, "dprobe.samples", [0, 1, 2], 30.0)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from aiokafka.structs import TopicPartition

log = logging.getLogger(__name__)


async def quiet_partitions(
    consumer: Any,
    topic: str,
    partitions: Iterable[int],
    quiet_s: float,
    *,
    now: float | None = None,
) -> set[int]:
    """The partitions of ``topic`` among ``partitions`` with nothing left for
    ``consumer``'s group to read and no record newer than ``quiet_s`` seconds before
    ``now`` (default: this machine's clock)."""
    tps = [TopicPartition(topic, p) for p in sorted(set(partitions))]
    if not tps:
        return set()
    since_ms = int(((time.time() if now is None else now) - quiet_s) * 1000)
    starts = await consumer.beginning_offsets(tps)
    ends = await consumer.end_offsets(tps)
    newer = await consumer.offsets_for_times(dict.fromkeys(tps, since_ms))
    quiet = set()
    for tp in tps:
        committed = await consumer.committed(tp)
        next_read = max(starts[tp], committed if committed is not None else 0)
        if next_read >= ends[tp] and newer.get(tp) is None:
            quiet.add(tp.partition)
    return quiet


async def quiet_taken_over(
    faust_consumer: Any,
    topic: str,
    partitions: Iterable[int],
    quiet_s: float,
    *,
    timeout_s: float = 10.0,
) -> set[int]:
    """:func:`quiet_partitions` asked through a faust worker's own Kafka consumer (on the
    thread it runs on, given up there after ``timeout_s``, so it never holds that thread
    longer); a failure logs why and returns no partition."""
    wanted = sorted(set(partitions))
    if not wanted:
        return set()
    thread = faust_consumer._thread

    async def ask() -> set[int]:
        consumer = thread._ensure_consumer()
        return await asyncio.wait_for(quiet_partitions(consumer, topic, wanted, quiet_s), timeout_s)

    try:
        return set(await thread.call_thread(ask))
    except Exception as exc:  # noqa: BLE001 - a hint only; the idle clock still works
        log.info("could not tell whether samples partitions %s were quiet: %r", wanted, exc)
        return set()
