"""A ``dprobe.samples`` record must be keyed by its snapshot's host (the topic's contract).

The key picks the partition, and a host's sequence state (duplicates, lost snapshots) is
kept per partition by the worker that holds it: a host whose snapshots arrive under
another key, or none, lands on several partitions, where several workers each see a part
of its sequence (duplicates let through, gaps counted as lost). Such a record is a dead
letter with reason ``wrong_key``.

    >>> wrong_key(b"gpu-node-1", "gpu-node-1") is None
    True
    >>> wrong_key(b"gpu-node-2", "gpu-node-1").reason
    'wrong_key'
"""

from __future__ import annotations

from dprobe import schema

REASON = "wrong_key"
_SHOWN = 80  # characters of a key named in the error


def wrong_key(key: bytes | None, host: str) -> schema.SchemaError | None:
    """Why a samples record keyed ``key`` cannot hold a snapshot of ``host``, or ``None``."""
    if key == host.encode():
        return None
    why = "the samples topic is keyed by host, so that each host's snapshots stay on one partition"
    if key is None:
        return schema.SchemaError(f"record has no key; its host is {host!r} ({why})", REASON)
    shown = key.decode("utf-8", "replace")[:_SHOWN]
    return schema.SchemaError(f"record key {shown!r} is not its host {host!r} ({why})", REASON)
