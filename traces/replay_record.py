"""One message to replay: event time, topic kind, key and value bytes.

Example:
    >>> from dprobe.schema import JobEvent, encode
    >>> rec = ReplayRecord.of(JobEvent(ts=5.0, event="submit", job="j", tenant="a", gpus=1))
    >>> rec.kind, rec.key, shifted(rec, 10.0).ts
    ('jobs', b'j', 15.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

from dprobe.schema import ClusterReport, HostSnapshot, JobEvent, SchemaError, encode
from dprobe.sinks.archive_schema import decode_record

Kind = Literal["samples", "jobs", "cluster"]


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    """A message for topic kind ``kind`` (``samples`` keyed by host, ``jobs`` by job,
    ``cluster`` by the reporting source)."""

    ts: float
    kind: Kind
    key: bytes | None
    value: bytes

    @staticmethod
    def of(msg: HostSnapshot | JobEvent | ClusterReport) -> ReplayRecord:
        """The record of a message, keyed as its topic's contract says."""
        if isinstance(msg, HostSnapshot):
            return ReplayRecord(msg.ts, "samples", msg.host.encode(), encode(msg))
        if isinstance(msg, ClusterReport):
            return ReplayRecord(msg.ts, "cluster", msg.source.encode(), encode(msg))
        return ReplayRecord(msg.ts, "jobs", msg.job.encode(), encode(msg))


def shifted(rec: ReplayRecord, delta_s: float) -> ReplayRecord:
    """``rec`` with its event time (``ts`` in the value too) moved by ``delta_s`` seconds;
    the rest of the value is kept as it was, fields this dprobe does not know included.

    A value that does not decode (dprobe's archive holds none, but a file written by
    another tool may) cannot be moved: it is replayed unchanged at the moved time, and
    the worker dead-letters it.

    >>> shifted(ReplayRecord(10.0, "samples", b"h", b"not json"), 5.0)
    ReplayRecord(ts=15.0, kind='samples', key=b'h', value=b'not json')
    """
    try:
        msg = decode_record(rec.kind, rec.value)
    except SchemaError:
        return ReplayRecord(rec.ts + delta_s, rec.kind, rec.key, rec.value)
    ts = msg.ts + delta_s
    # the value as it was, but its time: fields of a newer producer, which the contracts
    # ignore, are kept (a decoded message would drop them)
    body = msgspec.json.decode(rec.value)
    body["ts"] = ts
    return ReplayRecord(ts, rec.kind, rec.key, msgspec.json.encode(body))
