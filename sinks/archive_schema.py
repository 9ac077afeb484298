"""Row layout of the Parquet archive: one row per Kafka record, the raw value kept verbatim.

A row keeps what rebuilds the message exactly (``key`` and ``value``: the record's bytes,
unchanged) plus the record's place (``partition``, ``offset``, ``timestamp_ms``) and flattened
columns to filter on without decoding JSON: for ``samples`` ``ts``, ``host``, ``seq``,
``interval_s``, ``gpus``, ``procs``, ``tenants`` (distinct, sorted); for ``jobs`` ``ts``,
``event``, ``job``, ``tenant``, ``gpus_requested``; for ``cluster`` (the scheduler's
reports) ``ts``, ``source``, ``capacity_gpus`` (null: capacity not reported) and
``tenants`` (the tenants given a quota, sorted). Strings are dictionary-encoded.

Example:
    >>> from dprobe.schema import JobEvent, encode
    >>> ev = JobEvent(ts=1.0, event="submit", job="j1", tenant="vc-a", gpus=8)
    >>> row = row_of("jobs", ev, key=b"j1", value=encode(ev), partition=0, offset=7, timestamp_ms=5)
    >>> row["job"], row["gpus_requested"], row["offset"]
    ('j1', 8, 7)
"""

from __future__ import annotations

from typing import Any, Final

import pyarrow as pa

from dprobe.schema import ClusterReport, HostSnapshot, JobEvent, decode

KINDS: Final = ("samples", "jobs", "cluster")


def decode_record(kind: str, value: bytes | None) -> HostSnapshot | JobEvent | ClusterReport:
    """The message of a record of topic ``kind`` (one of :data:`KINDS`), whatever its size;
    :class:`~dprobe.schema.SchemaError` when invalid.

    >>> raw = b'{"v":1,"ts":1,"event":"finish","job":"j","tenant":"a","gpus":1}'
    >>> decode_record("jobs", raw).job
    'j'
    """
    if kind == "samples":
        return decode(value, HostSnapshot, max_bytes=None)
    if kind == "cluster":
        return decode(value, ClusterReport, max_bytes=None)
    if kind == "jobs":
        return decode(value, JobEvent, max_bytes=None)
    raise ValueError(f"unknown topic kind {kind!r} (expected one of {KINDS})")


_COMMON = [
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp_ms", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary(), nullable=False),
    pa.field("ts", pa.float64(), nullable=False),
]

SCHEMAS: Final[dict[str, pa.Schema]] = {
    "samples": pa.schema(
        [
            *_COMMON,
            pa.field("host", pa.string()),
            pa.field("seq", pa.int64()),
            pa.field("interval_s", pa.float64()),
            pa.field("gpus", pa.int32()),
            pa.field("procs", pa.int32()),
            pa.field("tenants", pa.list_(pa.string())),
        ]
    ),
    "jobs": pa.schema(
        [
            *_COMMON,
            pa.field("event", pa.string()),
            pa.field("job", pa.string()),
            pa.field("tenant", pa.string()),
            pa.field("gpus_requested", pa.int32()),
        ]
    ),
    "cluster": pa.schema(
        [
            *_COMMON,
            pa.field("source", pa.string()),
            pa.field("capacity_gpus", pa.float64()),
            pa.field("tenants", pa.list_(pa.string())),
        ]
    ),
}

# Dictionary-encode every string column (low cardinality: hosts, tenants, event kinds).
DICTIONARY_COLUMNS: Final[dict[str, list[str]]] = {
    "samples": ["host", "tenants.list.element"],
    "jobs": ["event", "job", "tenant"],
    "cluster": ["source", "tenants.list.element"],
}


def row_of(
    kind: str,
    msg: HostSnapshot | JobEvent | ClusterReport,
    *,
    key: bytes | None,
    value: bytes,
    partition: int,
    offset: int,
    timestamp_ms: int | None,
) -> dict[str, Any]:
    """The archive row of one decoded record of topic ``kind`` (one of :data:`KINDS`)."""
    row: dict[str, Any] = {
        "partition": partition,
        "offset": offset,
        "timestamp_ms": timestamp_ms,
        "key": key,
        "value": value,
        "ts": msg.ts,
    }
    if kind == "samples" and isinstance(msg, HostSnapshot):
        row.update(
            host=msg.host,
            seq=msg.seq,
            interval_s=msg.interval_s,
            gpus=len(msg.gpus),
            procs=len(msg.procs),
            tenants=sorted({p.tenant for p in msg.procs}),
        )
    elif kind == "jobs" and isinstance(msg, JobEvent):
        row.update(event=msg.event, job=msg.job, tenant=msg.tenant, gpus_requested=msg.gpus)
    elif kind == "cluster" and isinstance(msg, ClusterReport):
        row.update(source=msg.source, capacity_gpus=msg.capacity_gpus, tenants=sorted(msg.quotas))
    else:
        raise ValueError(f"a {type(msg).__name__} does not belong to topic kind {kind!r}")
    return row


def table_of(kind: str, rows: list[dict[str, Any]]) -> pa.Table:
    """An Arrow table of ``rows`` with the archive schema of ``kind``."""
    return pa.Table.from_pylist(rows, schema=SCHEMAS[kind])
