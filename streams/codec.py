"""Bytes <-> plain state for table values and internal messages (msgspec JSON).

Internal messages on the tenant-updates topic carry a one-byte kind prefix:
``P`` a list of window partials (:class:`~dprobe.streams.state.window_agg.Partial`) of one
tenant, in the order their snapshots were read; ``J`` a validated job event; ``W`` a
source watermark ``[samples partition, event time]``.

Messages on the single-partition planning topic carry ``T`` + a TenantWindow, ``C``
+ a :class:`WindowProgress` (a window partition emitted every window ending at or before
``upto``), ``Q`` + a validated ClusterReport (what the scheduler says the fleet is), or
``S`` + a :class:`WorkerStarted` (a worker joined with that window length; planning skips
it).

Example:
    >>> loads(dumps({"a": [1, 2]}))
    {'a': [1, 2]}
"""

from __future__ import annotations

from typing import Any

import msgspec

from dprobe.schema import (
    ClusterReport,
    JobEvent,
    TenantWindow,
    decode_cluster_report,
    decode_window,
)
from dprobe.streams.state.window_agg import Partial

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()
_partials = msgspec.json.Decoder(list[Partial])
_job = msgspec.json.Decoder(JobEvent)

PARTIAL = b"P"
JOB = b"J"
WATERMARK = b"W"
PLAN_WINDOW = b"T"
PROGRESS = b"C"
CLUSTER = b"Q"
STARTED = b"S"


class SourceWatermark(msgspec.Struct, frozen=True, array_like=True):
    """Every snapshot of samples partition ``source`` up to ``ts`` has been forwarded."""

    source: int
    ts: float


class WindowProgress(msgspec.Struct, frozen=True, array_like=True):
    """Window partition ``partition`` emitted every window ending at or before ``upto``."""

    partition: int
    upto: float


def dumps(value: Any) -> bytes:
    return _enc.encode(value)


def loads(raw: bytes | None) -> Any:
    return None if raw is None else _dec.decode(raw)


def encode_partials(parts: list[Partial]) -> bytes:
    return PARTIAL + _enc.encode(parts)


def encode_job(ev: JobEvent) -> bytes:
    return JOB + _enc.encode(ev)


def encode_watermark(w: SourceWatermark) -> bytes:
    return WATERMARK + _enc.encode(w)


_wm = msgspec.json.Decoder(SourceWatermark)


def decode_update(raw: bytes) -> list[Partial] | JobEvent | SourceWatermark:
    kind, body = raw[:1], raw[1:]
    if kind == WATERMARK:
        return _wm.decode(body)
    if kind == PARTIAL:
        return _partials.decode(body)
    if kind == JOB:
        return _job.decode(body)
    raise ValueError(f"unknown internal update kind {kind!r}")


class WorkerStarted(msgspec.Struct, frozen=True, array_like=True):
    """A worker that makes ``window_s``-long windows started its group at ``at`` (wall
    clock): newer than any window the group forwarded before it, so a worker joining
    after it is checked against the length the group runs with now. Of marks written
    within a short time of each other with no window between them (workers started at
    the same moment), the first one's length holds (streams/group_window.py).

    ``shape`` holds the worker's other settings that shape a window (``grace_s``, level
    thresholds, ...), which a worker that joins later compares with its own and warns of
    when they differ. ``joined``: the mark of a worker that joined running workers (it
    says nothing of the group's length). ``worker``: who marked (host and state folder),
    so that a worker restarted is not compared with its own earlier mark. Marks of older
    workers have none of these and decode with an empty ``shape``; older workers skip the
    fields they do not know.

    >>> decode_planning(b'S[60.0,1.0]')
    WorkerStarted(window_s=60.0, at=1.0, shape={}, joined=False, worker='')
    """

    window_s: float
    at: float
    shape: dict[str, Any] = msgspec.field(default_factory=dict)
    joined: bool = False
    worker: str = ""


_progress = msgspec.json.Decoder(WindowProgress)
_started = msgspec.json.Decoder(WorkerStarted)


def encode_plan_window(window: TenantWindow) -> bytes:
    return PLAN_WINDOW + _enc.encode(window)


def encode_progress(p: WindowProgress) -> bytes:
    return PROGRESS + _enc.encode(p)


def encode_cluster(report: ClusterReport) -> bytes:
    return CLUSTER + _enc.encode(report)


def encode_started(started: WorkerStarted) -> bytes:
    return STARTED + _enc.encode(started)


PlanningMessage = TenantWindow | WindowProgress | ClusterReport | WorkerStarted


def decode_planning(raw: bytes) -> PlanningMessage:
    kind, body = raw[:1], raw[1:]
    if kind == PROGRESS:
        return _progress.decode(body)
    if kind == PLAN_WINDOW:
        return decode_window(body)
    if kind == CLUSTER:
        return decode_cluster_report(body)
    if kind == STARTED:
        return _started.decode(body)
    raise ValueError(f"unknown planning message kind {kind!r}")
