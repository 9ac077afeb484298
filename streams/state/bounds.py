"""How the window stage keeps every table value under the Kafka message limit.

A table value travels as one changelog record, so a value larger than the producer's
``max_request_size`` (1 MiB by default) would stop the worker on every restart. Three
rules keep each value small whatever the input:

- names that only identify (hosts in a window's dedupe map, job ids in a job book) are
  stored as a fixed-size :func:`digest`, never as the (up to 256-character) name;
- state that grows with the fleet is split into shards chosen by :func:`shard_of`: a
  tenant window by host, a job book by job, the partition's tenant index by tenant;
- every shard has a byte budget (``max_state_bytes``): a record that would push a shard
  past it is not applied but sent to the dead-letter topic with reason ``state_full``
  (:class:`StateFull`). Replaying a dead letter later is safe: windows and job books
  ignore what they already applied.

Example:
    >>> digest("node-17")
    '4a4dc2495fd167f4'
    >>> shard_of("node-17", 8)
    4
    >>> shard_key(b"w|vc-a|120.0", 0), shard_key(b"w|vc-a|120.0", 3)
    (b'w|vc-a|120.0', b'w|vc-a|120.0|s3')
"""

from __future__ import annotations

import hashlib

from dprobe.errors import DprobeError

DEFAULT_MAX_STATE_BYTES = 524_288  # half of Kafka's default 1 MiB message limit
# What the window stage adds to every map it stores: ``,"off":<offset>`` (its restore rank,
# see streams/windows.py); each bound below that counts a stored map counts it.
RANK_BYTES = 32


class StateFull(DprobeError):
    """Applying a record would take a table value past its byte budget."""

    reason = "state_full"


_KNOWN: dict[str, tuple[str, int]] = {}  # name -> (digest, its value): asked per record
_KNOWN_MAX = 1 << 17  # names remembered at most (then forgotten all at once)


def _digest_and_value(name: str) -> tuple[str, int]:
    known = _KNOWN.get(name)
    if known is None:
        if len(_KNOWN) >= _KNOWN_MAX:
            _KNOWN.clear()
        hexed = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        known = _KNOWN[name] = (hexed, int(hexed, 16))
    return known


def digest(name: str) -> str:
    """A fixed-size (16 hex characters) stand-in for ``name``; stable across processes
    (remembered for the names last asked for: it is asked for every record)."""
    return _digest_and_value(name)[0]


def shard_of(name: str, shards: int) -> int:
    """The shard (``0 .. shards - 1``) that ``name`` belongs to; stable across processes."""
    if shards <= 1:
        return 0
    return _digest_and_value(name)[1] % shards


def shard_key(base: bytes, shard: int) -> bytes:
    """Table key of shard ``shard`` of the value stored under ``base`` (shard 0 keeps
    ``base`` itself, so state written before sharding is shard 0)."""
    return base if shard == 0 else base + b"|s" + str(shard).encode()
