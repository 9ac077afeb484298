"""Writes to a faust table from batch processing, with the changelog partition explicit.

Faust routes ``table[key] = value`` to the changelog partition of the *current event*,
which batch processing (``stream.take_events``) does not have. The batch agents of the
worker know the source partition of every record they fold, so they name it here. The
table must be co-partitioned with the records' topic, as faust requires anyway.

The changelog record is handed straight to the Kafka producer (``Topic.send``), not to
faust's ``send_soon`` buffer: the producer flush that precedes every offset commit
covers the producer, while faust's buffer flush gives up after 0.1 s without a message
sent, and a state write still in that buffer would be lost if the process died after
the commit.

Example:
    >>> import asyncio
    >>> class FakeTopic:
    ...     async def send(self, *, key, value, partition, key_serializer, value_serializer):
    ...         print(partition, key, value)
    >>> class FakeTable:
    ...     data = {}
    ...     changelog_topic = FakeTopic()
    ...     key_serializer = value_serializer = "raw"
    >>> t = FakeTable()
    >>> _ = asyncio.run(put(t, 2, b"k", b"v"))
    2 b'k' b'v'
    >>> t.data
    {b'k': b'v'}
"""

from __future__ import annotations

from typing import Any


async def put(table: Any, partition: int, key: bytes, value: bytes) -> Any:
    """Set ``key`` and log it to changelog partition ``partition``; returns the delivery
    future of the changelog record."""
    table.data[key] = value
    return await table.changelog_topic.send(
        key=key,
        value=value,
        partition=partition,
        key_serializer=table.key_serializer,
        value_serializer=table.value_serializer,
    )


async def delete(table: Any, partition: int, key: bytes) -> Any:
    """Remove ``key`` and log a tombstone to changelog partition ``partition``; returns the
    delivery future, or ``None`` when the key was not there."""
    if key not in table.data:
        return None
    del table.data[key]
    return await table.changelog_topic.send(
        key=key,
        value=None,
        partition=partition,
        key_serializer=table.key_serializer,
        value_serializer="raw",
    )
