"""A consumer group's start, committed where it has none, as kafka-console-consumer does.

A group with no committed offset on a partition starts where ``auto_offset_reset`` says
(the newest record, or the oldest). Unless that start is committed, a run that reads
nothing, or fails before it commits, leaves the next run to start at the newest record
again, past whatever came in between. :func:`commit_start` commits it.

Example (a stand-in for ``aiokafka.AIOKafkaConsumer``):
    >>> import asyncio
    >>> class Consumer:
    ...     offsets = {"p1": 40}  # committed already
    ...     async def committed(self, tp): return self.offsets.get(tp)
    ...     async def position(self, tp): return 7
    ...     async def commit(self, offsets): self.offsets.update(offsets)
    >>> c = Consumer()
    >>> asyncio.run(commit_start(c, {}, ["p0", "p1"])); c.offsets
    {'p1': 40, 'p0': 7}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


async def commit_start(
    consumer: Any, batch: Mapping[Any, list[Any]], partitions: Iterable[Any]
) -> None:
    """Commit where the group starts on each of ``partitions`` (assigned to ``consumer``)
    that it has no offset of. ``batch``: records just fetched, whose first offsets are the
    start where they hold any (the consumer's position is past them)."""
    for tp in partitions:
        if await consumer.committed(tp) is None:
            records = batch.get(tp)
            start = records[0].offset if records else await consumer.position(tp)
            await consumer.commit({tp: start})
