"""The planning stage's state in Kafka: checkpoints and a journal in a compacted changelog.

The plan loop's state lives in the faust table ``planning`` (one partition, like the
planning topic it follows; changelog ``<app_id>-planning-changelog``, compacted), so the
worker that takes the planning partition over (a rebalance, a crash, a rolling upgrade)
resumes where the last owner stopped. Keys:

==========================  ==============================================================
``j|<offset>``              a planning-topic record taken since the last checkpoint, as
                            read (offset zero-padded to 20 digits)
``c|<gen>|<i>``             piece ``i`` of checkpoint ``gen`` (the plan loop's state in
                            the checkpoint format, cut to at most ``chunk_bytes``)
``h|<offset>``              ``{"gen", "chunks", "sha256", "offset"}``: the head of the
                            checkpoint covering the planning topic up to ``offset``; the
                            one with the highest offset is in force
``head``                    the same as the last head written (what workers of versions
                            before keyed heads read: kept for a rolling upgrade)
==========================  ==============================================================

Heads are keyed by the offset they cover, and the highest wins, so a former owner that
wakes from a stall after another worker took planning over cannot put the table back to
an older state: its late checkpoint covers fewer records than the new owner's, whose
journal after it is still there.

Write order (each step's changelog records are delivered before the next starts, and
all of them before the planning record is acknowledged, so before its offset is
committed): the record's journal entry; at a plan, the new checkpoint's pieces, then its
head; then tombstones for the previous heads, the previous checkpoint's pieces and the
journal it covers. A crash between any two steps leaves a head whose pieces exist and a
journal that holds every record after it.

Example:
    >>> import asyncio
    >>> class Table:  # what the store uses of a faust table
    ...     key_serializer = value_serializer = "raw"
    ...     def __init__(self):
    ...         self.data, self.changelog_topic = {}, self
    ...     async def send(self, **record):
    ...         return asyncio.sleep(0)  # a delivery future
    >>> store = PlanningStore(Table(), chunk_bytes=4)
    >>> asyncio.run(store.journal(7, b"window"))
    >>> asyncio.run(store.checkpoint(8, b"0123456789"))
    >>> store.head()
    Head(gen=8, chunks=3, sha256='84d8...7882', offset=8)
    >>> store.load(store.head())
    b'0123456789'
    >>> asyncio.run(store.journal(9, b"progress"))
    >>> store.journal_between(8, 10)
    [(9, b'progress')]
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from dprobe.models.checkpoint import CheckpointError
from dprobe.streams import table_io

PARTITION = 0  # the planning topic, and so its table, has one partition
HEAD = b"head"  # the last head written, for workers of earlier versions
_HEAD = b"h|"
_JOURNAL = b"j|"
_CHUNK = b"c|"


@dataclass(frozen=True)
class Head:
    """The checkpoint in force: its generation, pieces, digest and the offset it covers."""

    gen: int
    chunks: int
    sha256: str
    offset: int


class PlanningStore:
    """Checkpoints and journal of the planning stage in a faust table (module doc)."""

    def __init__(self, table: Any, *, chunk_bytes: int) -> None:
        self.table = table
        self.chunk_bytes = chunk_bytes

    # -- writing ------------------------------------------------------------------------
    async def journal(self, offset: int, raw: bytes) -> None:
        """Keep one planning record until a checkpoint covers it (delivered on return)."""
        await _delivered(await table_io.put(self.table, PARTITION, _journal_key(offset), raw))

    async def checkpoint(self, offset: int, blob: bytes) -> None:
        """Make ``blob`` (the state after the record at ``offset``) the checkpoint in force,
        then drop the previous one and the journal up to ``offset``."""
        pieces = [blob[i : i + self.chunk_bytes] for i in range(0, len(blob), self.chunk_bytes)]
        futures = [
            await table_io.put(self.table, PARTITION, _chunk_key(offset, i), piece)
            for i, piece in enumerate(pieces or [b""])
        ]
        for fut in futures:
            await _delivered(fut)
        head = Head(offset, len(futures), hashlib.sha256(blob).hexdigest(), offset)
        value = json.dumps(asdict(head), sort_keys=True).encode()
        for key in (_head_key(offset), HEAD):
            await _delivered(await table_io.put(self.table, PARTITION, key, value))
        stale = [k for k in list(self.table.data) if _stale(k, head)]
        futures = [await table_io.delete(self.table, PARTITION, k) for k in stale]
        for fut in futures:
            await _delivered(fut)

    # -- reading ------------------------------------------------------------------------
    def head(self) -> Head | None:
        """The checkpoint in force (the head covering the highest offset), ``None`` before
        the first."""
        heads = []
        for key in list(self.table.data):
            if key == HEAD or key.startswith(_HEAD):
                try:
                    heads.append(Head(**json.loads(self.table.data[key])))
                except (ValueError, TypeError) as exc:
                    raise CheckpointError(
                        f"planning table: {key.decode(errors='replace')} is not a checkpoint "
                        f"head ({exc})"
                    ) from exc
        return max(heads, key=lambda h: h.offset, default=None)

    def load(self, head: Head) -> bytes:
        """The bytes of checkpoint ``head``; ``CheckpointError`` if a piece is missing or
        they do not match its digest."""
        pieces = [self.table.data.get(_chunk_key(head.gen, i)) for i in range(head.chunks)]
        if any(p is None for p in pieces):
            raise CheckpointError(f"planning table: checkpoint {head.gen} misses pieces")
        blob = b"".join(p for p in pieces if p is not None)
        if hashlib.sha256(blob).hexdigest() != head.sha256:
            raise CheckpointError(f"planning table: checkpoint {head.gen} fails its digest")
        return blob

    def journal_between(self, after: int, before: int) -> list[tuple[int, bytes]]:
        """Journaled records with ``after < offset < before``, in offset order."""
        out = []
        for key in list(self.table.data):
            offset = _journal_offset(key)
            if offset is not None and after < offset < before:
                out.append((offset, self.table.data[key]))
        return sorted(out)

    def forget_local(self) -> None:
        """Drop this worker's copy (the partition went to another worker; the changelog
        rebuilds it if it comes back)."""
        self.table.data.clear()


def _journal_key(offset: int) -> bytes:
    return b"j|%020d" % offset


def _journal_offset(key: bytes) -> int | None:
    """The planning offset of a journal key (``None``: not a journal key)."""
    return int(key[len(_JOURNAL) :]) if key.startswith(_JOURNAL) else None


def _head_key(offset: int) -> bytes:
    return b"h|%020d" % offset


def _chunk_key(gen: int, i: int) -> bytes:
    return b"c|%020d|%06d" % (gen, i)


def _stale(key: bytes, head: Head) -> bool:
    """A journal entry ``head`` covers, or another checkpoint's head or piece."""
    offset = _journal_offset(key)
    if offset is not None:
        return offset <= head.offset
    if key.startswith(_HEAD):
        return key != _head_key(head.offset)
    if key.startswith(_CHUNK):
        return int(key.split(b"|")[1]) != head.gen
    return False


async def _delivered(fut: Any) -> None:
    """Wait for a changelog delivery (``None``: nothing was sent)."""
    if fut is not None:
        await fut
