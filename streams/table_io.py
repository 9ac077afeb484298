"""Writes to a faust table from batch processing, with the changelog partition explicit.

Faust routes ``table[key] = value`` to the changelog partition of the *current event*,
which batch processing (``stream.take_events``) does not have. The batch agents of the
worker know the source partition of every record they fold, so they name it here.
The table must be co-partitioned with the records' topic, as faust requires anyway.

Example:
    >>> class FakeTable(dict):
    ...     data = {}
    ...     def send_changelog(self, partition, key, value, key_serializer=None,
    ...                        value_serializer=None):
    ...         print(partition, key, value)
    >>> t = FakeTable()
    >>> put(t, 2, b"k", b"v")
    2 b'k' b'v'
    >>> t.data
    {b'k': b'v'}
"""

from __future__ import annotations

from typing import Any


def put(table: Any, partition: int, key: bytes, value: bytes) -> None:
    """Set ``key`` in the table and log it to changelog partition ``partition``."""
    table.data[key] = value
    table.send_changelog(partition, key, value)


def delete(table: Any, partition: int, key: bytes) -> None:
    """Remove ``key`` (if present) and log a tombstone to changelog partition ``partition``."""
    if key in table.data:
        del table.data[key]
        table.send_changelog(partition, key, None, value_serializer="raw")
