"""A faust table whose restore never puts a key back to an older value.

Faust rebuilds a table from its changelog in log order, so the last record of a key wins.
With one writer per partition that is the newest value, but a worker that wakes up from a
stall after the group gave its partitions to another (a frozen VM, a long pause) can still
write the batch it had in hand, *after* the new owner's newer values. The ingest stage's
host sequence states are such a table: a late, older state restored later would make the
snapshots between the two count as lost and let redeliveries of them through. The window
stage's table is another: a late, older window shard would drop what the new owner had
added to it.

Each value of a :class:`RankedTable` carries a rank (for host states: the offset of the
samples record it accounts for, ``"off"``), and restoring keeps, per key, a record only
when its rank is at least that of the value it would replace. A value without a rank (one
written by an earlier version) is applied as before, last one wins; a tombstone always is.
The active owner's own writes do not go through this: it holds the newest values already.

Example:
    >>> from types import SimpleNamespace as E
    >>> from dprobe.streams import codec
    >>> def rec(key, off):
    ...     return E(key=key, value=codec.dumps({"seq": off, "off": off}))
    >>> batch = [rec(b"h1", 208), rec(b"h1", 62), rec(b"h2", 5)]  # 62: a stalled writer's
    >>> [(e.key, codec.loads(e.value)["off"]) for e in advancing(batch, {}.get, offset_rank)]
    [(b'h1', 208), (b'h2', 5)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import faust

from dprobe.streams import codec

RANK_KEY = "off"


def offset_rank(value: bytes | None) -> int | None:
    """The rank of a stored state: its ``"off"``, None when it has none (or is not a map)."""
    if value is None:
        return None
    try:
        state = codec.loads(value)
    except Exception:  # noqa: BLE001 - a value this code cannot read has no rank
        return None
    rank = state.get(RANK_KEY) if isinstance(state, dict) else None
    return rank if isinstance(rank, int) else None


def advancing(
    batch: Iterable[Any],
    current: Callable[[Any], bytes | None],
    rank: Callable[[bytes | None], int | None],
) -> list[Any]:
    """The records of ``batch`` (changelog events: ``.key``, ``.value``) that do not put
    their key back: a record is dropped when both it and the value it would replace (the
    last one kept in this batch, else ``current(key)``) have a rank and its rank is lower."""
    last: dict[Any, int | None] = {}
    kept = []
    for event in batch:
        key = event.key
        new = rank(event.value)  # None for a tombstone
        old = last[key] if key in last else rank(current(key))
        if new is not None and old is not None and new < old:
            continue
        last[key] = new
        kept.append(event)
    return kept


class RankedTable(faust.Table):
    """A faust table restored by :func:`advancing` with :func:`offset_rank` (module doc)."""

    def apply_changelog_batch(self, batch: Iterable[Any]) -> None:
        events = advancing(batch, lambda key: self.data.get(self._to_key(key)), offset_rank)
        super().apply_changelog_batch(events)


def add_ranked_table(app: faust.App, name: str, partitions: int | None = None) -> Any:
    """A :class:`RankedTable` ``name`` of ``app``, with bytes keys and values (faust then
    (de)serializes its changelog as raw bytes); ``partitions``: the app's default."""
    return app.tables.add(
        RankedTable(
            app, name=name, beacon=app.tables.beacon, partitions=partitions,
            key_type=bytes, value_type=bytes,
        )
    )  # fmt: skip
