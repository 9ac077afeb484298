"""Message contracts of every dprobe topic, with their JSON codecs.

Each message is a frozen, typed struct with a schema version ``v``. Encoding is JSON
(UTF-8) through msgspec; decoding validates every field at the edge and raises
:class:`SchemaError` naming the field that failed (``$.gpus[0].util``): NaN and
infinities, negative sizes, utilisation outside 0-100, missing or wrongly typed fields,
an unknown version, or a message larger than ``max_bytes``. Unknown extra fields are
ignored, so a newer producer can add optional fields without breaking older workers.

Versions: every contract is at ``v`` 1 (:data:`SCHEMA_VERSION`) except the TenantWindow,
at ``v`` 2 (:data:`WINDOW_VERSION`: the optional job ``flow``); a window of ``v`` 1 still
decodes, as a TenantWindow without a flow.

Example:
    >>> snap = HostSnapshot(host="gpu-1", ts=1.7e9, interval_s=1.0, seq=0, gpus=(), procs=())
    >>> raw = encode(snap)
    >>> decode_snapshot(raw) == snap
    True
    >>> decode_snapshot(b'{"v": 1, "host": "gpu-1"}')
    Traceback (most recent call last):
    ...
    dprobe.schema.SchemaError: Object missing required field `ts` (at $)
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from typing import Annotated, Any, Final, Literal, TypeVar, Union

import msgspec

from dprobe.errors import UsageError

SCHEMA_VERSION: Final = 1
WINDOW_VERSION: Final = 2  # TenantWindow: v2 added the optional ``flow``
MAX_FLOW_EDGES: Final = 15  # bucket edges of a JobFlow (so at most 16 buckets)
DEFAULT_MAX_BYTES: Final = 1_048_576  # a HostSnapshot of 8 GPUs x 64 processes is ~15 KiB

# Bounds of the contracts, for producers that cut or refuse a value before sending it.
MAX_ID_CHARS: Final = 256  # an id (tenant, job, host, GPU UUID) or a label (a model name)
MAX_EPOCH_S: Final = 1e11  # the latest time a message carries (the year 5138)
MAX_SPAN_S: Final = 1e7  # the longest duration or horizon a message carries (115 days)
MAX_GPUS: Final = 1e7  # the most GPUs a message carries
MAX_PID: Final = 2**31  # the largest pid a message carries
MAX_BATCH: Final = 2**31  # the largest batch size a message carries

# Field types shared by the contracts. Bounds make NaN, +-inf and absurd values fail.
Pct = Annotated[float, msgspec.Meta(ge=0.0, le=100.0)]
Bytes = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0.0, le=1e15)]
EpochS = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_EPOCH_S)]
PositiveS = Annotated[float, msgspec.Meta(gt=0.0, le=MAX_SPAN_S)]
Gpus = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_GPUS)]
SignedGpus = Annotated[float, msgspec.Meta(ge=-MAX_GPUS, le=MAX_GPUS)]
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]
Label = Annotated[str, msgspec.Meta(max_length=MAX_ID_CHARS)]

UNASSIGNED: Final = "unassigned"

# The demand level of one GPU instance (DProbe's multi-level demand, ``LevelCounts``).
Level = Literal["L1", "L2", "L3", "EX"]
LEVELS: Final[tuple[Level, ...]] = ("L1", "L2", "L3", "EX")


class SchemaError(UsageError):
    """A message does not follow its contract. ``str()`` names the field and the rule.

    ``reason`` is a short machine-readable code (bounded set, usable as a metric label):
    ``oversized``, ``malformed_json``, ``unknown_version``, ``invalid_field``, ``inconsistent``.
    """

    def __init__(self, message: str, reason: str = "invalid_field") -> None:
        super().__init__(message)
        self.reason = reason


class _Msg(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="v", tag=SCHEMA_VERSION
):
    """Base of all top-level contracts: frozen, keyword-only, always encoded with ``v``.

    A contract whose documented fields have defaults sets ``omit_defaults=False``, so those
    fields are on the wire also at their default (``0``, ``[]``, ``null``); only optional
    attributes of GPUs, processes and job events are left out when unknown."""


class _NoVersion(msgspec.Struct, frozen=True, tag_field="v", tag=0):
    """Decoding sentinel: makes ``v`` required on decode (a v=0 message decodes to it)."""


class _Part(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of nested parts of a message (no version of their own)."""


class Gpu(_Part, frozen=True, kw_only=True):
    """One GPU (or MIG instance) of a host at one tick. ``mig_parent`` is the parent's UUID."""

    uuid: Id
    index: Annotated[int, msgspec.Meta(ge=0, le=4096)]
    util: Pct
    mem_util: Pct
    mem_used: Bytes
    mem_total: Bytes
    power_w: Annotated[float, msgspec.Meta(ge=0.0, le=100_000.0)]
    sm_clock_mhz: Annotated[float, msgspec.Meta(ge=0.0, le=100_000.0)] | None = None
    mig_parent: Id | None = None
    name: Label | None = None


class Proc(_Part, frozen=True, kw_only=True):
    """One GPU process at one tick, attributed to a tenant and a job."""

    pid: Annotated[int, msgspec.Meta(ge=0, le=MAX_PID)]
    gpu: Id
    tenant: Id
    job: Id
    sm_util: Pct
    mem_util: Pct
    mem_used: Bytes
    model: Label | None = None
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_BATCH)] | None = None
    amp: bool | None = None


class HostSnapshot(_Msg, frozen=True, kw_only=True, omit_defaults=False):
    """Topic ``dprobe.samples``, key = host: every GPU and GPU process of a host at one tick.

    ``seq`` counts snapshots per host and never repeats; a gap downstream is a lost snapshot.
    """

    host: Id
    ts: EpochS
    interval_s: PositiveS
    seq: Count
    gpus: tuple[Gpu, ...] = ()
    procs: tuple[Proc, ...] = ()


JobEventKind = Literal["submit", "start", "finish", "cancel"]


class JobEvent(_Msg, frozen=True, kw_only=True):
    """Topic ``dprobe.jobs``, key = job: a scheduler's job lifecycle event.

    Only the scheduler knows what is pending, so demand = what runs + what waits.
    """

    ts: EpochS
    event: JobEventKind
    job: Id
    tenant: Id
    gpus: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
    model: Label | None = None
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_BATCH)] | None = None
    amp: bool | None = None
    params_m: NonNegFloat | None = None


class LevelCounts(_Part, frozen=True, kw_only=True, omit_defaults=False):
    """Process samples per utilisation level in a window (DProbe's multi-level demand): an
    instance running all window counts once per collector tick."""

    L1: Count = 0
    L2: Count = 0
    L3: Count = 0
    EX: Count = 0


class LevelGpus(_Part, frozen=True, kw_only=True, omit_defaults=False):
    """GPUs per utilisation level (the predicted level of queued jobs)."""

    L1: Gpus = 0.0
    L2: Gpus = 0.0
    L3: Gpus = 0.0
    EX: Gpus = 0.0


FlowEdges = Annotated[tuple[PositiveS, ...], msgspec.Meta(min_length=1, max_length=MAX_FLOW_EDGES)]
GpuBuckets = Annotated[tuple[Gpus, ...], msgspec.Meta(max_length=MAX_FLOW_EDGES + 1)]
CountBuckets = Annotated[tuple[Count, ...], msgspec.Meta(max_length=MAX_FLOW_EDGES + 1)]


class JobFlow(_Part, frozen=True, kw_only=True):
    """A tenant's job book summarised at the end of a window, and its flow in the window.

    Buckets are ``[0, e0), [e0, e1), ..., [e_last, inf)`` over ``edges_s`` (seconds), so
    every bucket list has ``len(edges_s) + 1`` entries. At the window's end:
    ``running_by_age`` (GPUs of running jobs by time since their start),
    ``pending_by_level`` (GPUs of queued jobs by their predicted level) and
    ``pending_by_wait`` (by time since their submit). In the window: jobs and GPUs
    ``submitted``, ``started`` and ``finished`` (finish or cancel), and
    ``finished_by_duration`` (jobs that finished after running, by run time).
    """

    edges_s: FlowEdges
    running_by_age: GpuBuckets
    pending_by_level: LevelGpus
    pending_by_wait: GpuBuckets
    submitted_jobs: Count
    submitted_gpus: Gpus
    started_jobs: Count
    started_gpus: Gpus
    finished_jobs: Count
    finished_gpus: Gpus
    finished_by_duration: CountBuckets


class TenantWindow(_Msg, frozen=True, kw_only=True, omit_defaults=False, tag=WINDOW_VERSION):
    """Topic ``dprobe.features``, key = tenant: one closed event-time window of one tenant.

    ``flow`` (``v`` 2) summarises the tenant's jobs when a scheduler reports them.
    """

    tenant: Id
    window_start: EpochS
    window_end: EpochS
    hosts: Count
    gpus_busy: Gpus
    instances: NonNegFloat
    util_sum: NonNegFloat
    level_counts: LevelCounts
    effective_demand_gpus: Gpus
    pending_gpus: Gpus
    running_gpus: Gpus
    quota_gpus: Gpus | None = None
    samples: Count = 0
    lost_snapshots: Count = 0
    flow: JobFlow | None = None


class _TenantWindowV1(TenantWindow, frozen=True, kw_only=True, tag=1):
    """Decoding only: a window of ``v`` 1 (no ``flow``), upgraded to a TenantWindow."""


class Forecast(_Part, frozen=True, kw_only=True):
    """A demand forecast in GPUs at one horizon."""

    horizon_s: PositiveS
    p50: Gpus
    p90: Gpus


class ModelInfo(_Part, frozen=True, kw_only=True):
    name: Id
    version: Id


ScalingAction = Literal["scale_up", "scale_down"]


class ScalingEvent(_Msg, frozen=True, kw_only=True, omit_defaults=False):
    """Topic ``dprobe.scaling-events``, key = tenant: one quota move of one plan.

    CloudEvents-like envelope (``event_id`` = id, ``type``, ``source``, ``time``). The
    ``event_id`` is deterministic from tenant, window and plan, so consumers drop
    duplicates; the deltas of all events with one ``plan_id`` sum to zero. ``plan_seq``
    orders plans (it grows with every plan: the plan's window end in milliseconds) and
    ``plan_size`` is the number of events of the plan, so a consumer applies a plan
    once all of its events are in, in plan order (0: an older worker, neither known). A Kueue
    controller sets ``nominalQuota`` of the tenant's ClusterQueue to
    ``target_quota_gpus``; a Volcano one sets the queue's ``deserved``.
    """

    event_id: Id
    plan_id: Id
    ts: EpochS
    time: Id
    tenant: Id
    action: ScalingAction
    current_quota_gpus: Gpus
    target_quota_gpus: Gpus
    delta_gpus: SignedGpus
    forecast: Forecast
    reason: Id
    message: Label
    model: ModelInfo
    type: Id = "io.dprobe.scaling.v1"
    source: Id = "dprobe/worker"
    resource: Id = "nvidia.com/gpu"
    guaranteed_gpus: Gpus = 0.0
    window_end: EpochS = 0.0
    plan_seq: Count = 0
    plan_size: Count = 0


MAX_REPORTED_TENANTS: Final = 100_000


class ClusterReport(_Msg, frozen=True, kw_only=True, omit_defaults=False):
    """Topic ``dprobe.cluster``, key = source: what the scheduler says the fleet is.

    A scheduler adapter (or ``dprobe cluster publish``, or a replayed trace that carries
    quotas) publishes the capacity tenants share and each tenant's quota now (Kueue: the
    ClusterQueue's ``nominalQuota``; Volcano: the queue's ``deserved``). The planner plans
    from the latest values it has received instead of its own bookkeeping. Both parts are
    optional: ``capacity_gpus`` ``None`` leaves the capacity as it was, and only the
    tenants listed in ``quotas`` change, unless ``complete`` is true: then every tenant not
    listed holds no quota.
    """

    ts: EpochS
    source: Id
    capacity_gpus: Gpus | None = None
    quotas: Annotated[dict[Id, Gpus], msgspec.Meta(max_length=MAX_REPORTED_TENANTS)] = {}
    complete: bool = False


class DeadLetter(_Msg, frozen=True, kw_only=True, omit_defaults=False):
    """Topic ``dprobe.deadletter``: a record that failed validation, kept with the reason."""

    source_topic: Id
    partition: Annotated[int, msgspec.Meta(ge=-1, le=1_000_000)]
    offset: Annotated[int, msgspec.Meta(ge=-1)]
    reason: Id
    error: Label
    raw: str
    ts: EpochS = 0.0


Message = HostSnapshot | JobEvent | TenantWindow | ScalingEvent | ClusterReport | DeadLetter
M = TypeVar("M", HostSnapshot, JobEvent, TenantWindow, ScalingEvent, ClusterReport, DeadLetter)

# Older versions each contract still decodes (upgraded on decode).
_OLDER: dict[type, tuple[type, ...]] = {TenantWindow: (_TenantWindowV1,)}
_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}
_VERSION_RE = re.compile(rb'"v"\s*:\s*(-?[0-9.eE+]+)')


def encode(msg: Message) -> bytes:
    """Encode any contract to compact JSON bytes.

    >>> encode(JobEvent(ts=1.0, event="submit", job="j1", tenant="vc-a", gpus=8))
    b'{"v":1,"ts":1.0,"event":"submit","job":"j1","tenant":"vc-a","gpus":8}'
    """
    return _encoder.encode(msg)


def decode(raw: bytes | None, kind: type[M], *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> M:
    """Decode and validate ``raw`` as ``kind``; raise :class:`SchemaError` naming the field.
    ``max_bytes=None`` takes a record of any size (one Kafka held already).
    Every way ``raw`` can fail (size, JSON, UTF-8, nesting, types, values) is a
    :class:`SchemaError`, so a caller that dead-letters those never stops on a record.

    >>> decode(b'{"v":1,"ts":1,"event":"submit","job":"j","tenant":"t","gpus":-1}', JobEvent)
    Traceback (most recent call last):
    ...
    dprobe.schema.SchemaError: Expected `int` >= 0 (at $.gpus)
    """
    if raw is None:
        raise SchemaError("empty record (a tombstone)", "malformed_json")
    if max_bytes is not None and len(raw) > max_bytes:
        raise SchemaError(
            f"message of {len(raw)} bytes exceeds the limit of {max_bytes}", "oversized"
        )
    dec = _decoders.get(kind)
    if dec is None:
        accepted = (kind, *_OLDER.get(kind, ()), _NoVersion)
        dec = _decoders[kind] = msgspec.json.Decoder(Union[accepted])  # noqa: UP007
    try:
        msg = dec.decode(raw)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if text.startswith("Invalid value") and text.endswith("- at `$.v`"):
            raise _unknown_version(raw, kind) from None
        raise SchemaError(_field_message(text)) from None
    except msgspec.DecodeError as exc:
        where = _non_finite_path(raw)
        if where:
            raise SchemaError(f"non-finite number (NaN or Infinity) (at {where})") from None
        raise SchemaError(f"not valid JSON: {exc}", "malformed_json") from None
    except UnicodeDecodeError as exc:
        raise SchemaError(f"not valid UTF-8 ({exc.reason})", "malformed_json") from None
    except RecursionError:
        raise SchemaError("JSON nested too deeply", "malformed_json") from None
    except Exception as exc:  # noqa: BLE001 - any other way bytes fail to decode is bad input
        raise SchemaError(f"undecodable: {type(exc).__name__}", "malformed_json") from None
    if isinstance(msg, _NoVersion):
        raise _unknown_version(raw, kind)
    if isinstance(msg, _TenantWindowV1):
        msg = _upgrade_window(msg)
    _check_consistency(msg)
    return msg


def versions_of(kind: type) -> tuple[int, ...]:
    """Schema versions ``decode`` accepts for ``kind``, newest (the one written) first.

    >>> versions_of(TenantWindow), versions_of(JobEvent)
    ((2, 1), (1,))
    """
    kinds = (kind, *_OLDER.get(kind, ()))
    return tuple(int(t.__struct_config__.tag) for t in kinds)  # type: ignore[attr-defined]


def _upgrade_window(old: TenantWindow) -> TenantWindow:
    """The current TenantWindow of a decoded older one (same fields, no ``flow``)."""
    fields = {f: getattr(old, f) for f in TenantWindow.__struct_fields__ if f != "flow"}
    return TenantWindow(**fields)


def _unknown_version(raw: bytes, kind: type) -> SchemaError:
    m = _VERSION_RE.search(raw)
    found = m.group(1).decode() if m else "?"
    reads = "/".join(f"v{v}" for v in sorted(versions_of(kind)))
    return SchemaError(
        f"unknown schema version {found} (this build reads {reads}) (at $.v)",
        "unknown_version",
    )


def _non_finite_path(raw: bytes) -> str | None:
    """Path of the first NaN/Infinity literal in ``raw`` (JSON extended by Python's json).

    Only called on the error path, to name the field of a producer that wrote NaN.
    """
    marker = "\x00nonfinite"
    try:
        doc = json.loads(raw, parse_constant=lambda _c: marker)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None

    def walk(node: Any, path: str) -> str | None:
        if node == marker and isinstance(node, str):
            return path
        if isinstance(node, dict):
            for k, v in node.items():
                found = walk(v, f"{path}.{k}")
                if found:
                    return found
        elif isinstance(node, list):
            for i, v in enumerate(node):
                found = walk(v, f"{path}[{i}]")
                if found:
                    return found
        return None

    return walk(doc, "$")


def _field_message(text: str) -> str:
    """Turn msgspec's ``"... - at `$.x`"`` into ``"... (at $.x)"``."""
    head, sep, where = text.rpartition(" - at ")
    if not sep:
        return f"{text} (at $)"
    if where.startswith("`key` in "):  # a mapping's key: "(at a key of $.quotas)"
        return f"{head} (at a key of {where[len('`key` in ') :].strip('`')})"
    return f"{head} (at {where.strip('`')})"


def _check_consistency(msg: Message) -> None:
    """Rules across fields that a type alone cannot say."""
    if isinstance(msg, HostSnapshot):
        uuids = {g.uuid for g in msg.gpus}
        for i, g in enumerate(msg.gpus):
            if g.mem_used > g.mem_total:
                raise SchemaError(
                    f"mem_used {g.mem_used} exceeds mem_total {g.mem_total}"
                    f" (at $.gpus[{i}].mem_used)",
                    "inconsistent",
                )
        for i, p in enumerate(msg.procs):
            if p.gpu not in uuids:
                raise SchemaError(
                    f"process on unknown GPU {p.gpu!r} (at $.procs[{i}].gpu)", "inconsistent"
                )
    elif isinstance(msg, TenantWindow):
        if msg.window_end <= msg.window_start:
            raise SchemaError(
                "window_end must be after window_start (at $.window_end)", "inconsistent"
            )
        if msg.flow is not None:
            _check_flow(msg.flow)
    elif isinstance(msg, ScalingEvent):
        if abs(msg.target_quota_gpus - msg.current_quota_gpus - msg.delta_gpus) > 1e-6:
            raise SchemaError(
                "delta_gpus must equal target_quota_gpus - current_quota_gpus (at $.delta_gpus)",
                "inconsistent",
            )
        if (msg.action == "scale_up") != (msg.delta_gpus > 0):
            raise SchemaError(
                f"action {msg.action} disagrees with delta_gpus (at $.action)", "inconsistent"
            )


def _check_flow(flow: JobFlow) -> None:
    edges = flow.edges_s
    if any(b <= a for a, b in itertools.pairwise(edges)):
        raise SchemaError("edges_s must increase (at $.flow.edges_s)", "inconsistent")
    for name in ("running_by_age", "pending_by_wait", "finished_by_duration"):
        if len(getattr(flow, name)) != len(edges) + 1:
            raise SchemaError(
                f"{name} must have len(edges_s) + 1 = {len(edges) + 1} buckets (at $.flow.{name})",
                "inconsistent",
            )


def decode_snapshot(raw: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> HostSnapshot:
    """Decode a ``dprobe.samples`` value. See :func:`decode`."""
    return decode(raw, HostSnapshot, max_bytes=max_bytes)


def decode_job_event(raw: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> JobEvent:
    """Decode a ``dprobe.jobs`` value. See :func:`decode`."""
    return decode(raw, JobEvent, max_bytes=max_bytes)


def decode_window(raw: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> TenantWindow:
    """Decode a ``dprobe.features`` value. See :func:`decode`."""
    return decode(raw, TenantWindow, max_bytes=max_bytes)


def decode_scaling_event(raw: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ScalingEvent:
    """Decode a ``dprobe.scaling-events`` value. See :func:`decode`."""
    return decode(raw, ScalingEvent, max_bytes=max_bytes)


def decode_cluster_report(
    raw: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> ClusterReport:
    """Decode a ``dprobe.cluster`` value. See :func:`decode`.

    >>> decode_cluster_report(b'{"v":1,"ts":5,"source":"kueue","quotas":{"vc-a":16}}').quotas
    {'vc-a': 16.0}
    """
    return decode(raw, ClusterReport, max_bytes=max_bytes)


def dead_letter(
    raw: bytes | None,
    error: SchemaError | Exception,
    *,
    source_topic: str,
    partition: int,
    offset: int,
    ts: float = 0.0,
    max_raw_bytes: int = 4096,
) -> DeadLetter:
    """Build the dead-letter record for an invalid input (raw kept base64, truncated).

    >>> dl = dead_letter(b"{oops", SchemaError("bad", "malformed_json"),
    ...                  source_topic="dprobe.samples", partition=0, offset=7)
    >>> dl.reason, base64.b64decode(dl.raw)
    ('malformed_json', b'{oops')
    """
    reason = getattr(error, "reason", None) or type(error).__name__
    body = (raw or b"")[:max_raw_bytes]
    return DeadLetter(
        source_topic=source_topic,
        partition=partition,
        offset=offset,
        reason=reason,
        error=str(error)[:256],
        raw=base64.b64encode(body).decode("ascii"),
        ts=ts,
    )


def to_builtins(msg: Message) -> dict[str, Any]:
    """Plain dict of a message (for ``--json`` output and Parquet rows)."""
    out: dict[str, Any] = msgspec.to_builtins(msg)
    return out
