"""Per-tenant event-time window aggregation as pure functions over plain state.

Two steps, so a stream worker can pre-aggregate before repartitioning by tenant:

1. :func:`split_snapshot` turns one HostSnapshot into one :class:`Partial` per tenant
   present on that host (what the host-keyed stage sends to the tenant-keyed stage);
2. :func:`initial` / :func:`add` / :func:`merge` / :func:`result` fold partials into a
   window state (a plain, JSON-serialisable dict) and turn it into a TenantWindow.

``add`` is idempotent per ``(host, seq)``: a partial whose snapshot was already applied
to the window is ignored, so at-least-once delivery never double-counts. The state
remembers each host's last seq under the host's fixed-size digest
(:func:`~dprobe.streams.state.bounds.digest`), so its size grows by a bounded amount per
host whatever the host names are (:data:`HOST_ENTRY_BYTES`). Sums are kept
in integer micro-units, so the result does not depend on the order in which partials of
different hosts arrive: the same window always has exactly the same content.

Window semantics (what each TenantWindow field means):

- a snapshot *covers* ``interval_s`` seconds (at most the window's length, so one
  snapshot with a wrong interval cannot inflate a window); time-weighted fields divide
  the covered seconds by the window length, so they are time averages over the window:
  ``instances`` (process instances running), ``gpus_busy`` (distinct GPUs with at least one
  of the tenant's processes) and the running part of ``effective_demand_gpus``
  (sum of level weights);
- ``samples`` counts process samples, ``level_counts`` counts process samples per level,
  ``util_sum`` sums their SM utilisation (%), ``hosts`` counts distinct hosts;
- the level of a sample uses the device utilisation of its GPU as "GPU util" and the
  process's own SM utilisation as "SM util" (assumption: the paper does not say how it
  splits a shared GPU's utilisation between processes);
- ``pending_gpus`` / ``running_gpus`` come from the scheduler's job events when known
  (the jobs queued and running at the window's end); ``running_gpus`` is at least
  ``gpus_busy``; ``effective_demand_gpus`` adds the pending GPUs weighted by the level the
  job profiler predicts for each queued job (``pending_effective_gpus``; by default every
  pending GPU counts at the weight of ``flow.unknown_level``, EX = 1.0: assumption, a
  queued job never levelled needs its GPUs whole);
- ``flow`` is the job flow of the window (:mod:`dprobe.models.job_flow`), when known.

Example:
    >>> from dprobe.schema import Gpu, HostSnapshot, Proc
    >>> g = Gpu(uuid="g0", index=0, util=90, mem_util=50, mem_used=10**10,
    ...         mem_total=8 * 10**10, power_w=300)
    >>> p = Proc(pid=1, gpu="g0", tenant="vc-a", job="j1", sm_util=80, mem_util=40,
    ...          mem_used=10**10)
    >>> snap = HostSnapshot(host="h1", ts=125.0, interval_s=60.0, seq=0, gpus=(g,), procs=(p,))
    >>> cfg = WindowSettings(window_s=60.0)
    >>> [part] = split_snapshot(snap, cfg)
    >>> state = add(initial(part.tenant, part.window_start), part)
    >>> w = result(state, cfg)
    >>> (w.window_start, w.window_end, w.instances, w.level_counts.L3, w.effective_demand_gpus)
    (120.0, 180.0, 1.0, 1, 0.7)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from dprobe.models.job_flow import FlowSettings
from dprobe.models.levels import LEVELS, LevelSettings
from dprobe.schema import HostSnapshot, JobFlow, LevelCounts, TenantWindow
from dprobe.streams.state.bounds import DEFAULT_MAX_STATE_BYTES, RANK_BYTES, digest

_LEVEL_INDEX = {lvl: i for i, lvl in enumerate(LEVELS)}
_SUMS = ("instance_s", "gpu_s", "util_sum", "weighted_s")
MICRO = 1_000_000  # sums are integers in millionths: exact and order-independent
HOST_ENTRY_BYTES = 40  # upper bound of one host's entry in "applied": "<16 hex>":<seq>,
STATE_BASE_BYTES = 2_048 + RANK_BYTES  # a state without hosts (tenant <= 1,538 bytes)


@dataclass(frozen=True)
class WindowSettings:
    """Window length, lateness and demand settings of the window stage."""

    window_s: float = 60.0
    grace_s: float = 10.0
    source_idle_s: float = 30.0
    host_shards: int = 8  # a tenant's window is stored in this many shards, split by host
    book_shards: int = 16  # a tenant's job book is stored in this many shards, split by job
    index_shards: int = 64  # a partition's tenant index, split by tenant
    max_state_bytes: int = DEFAULT_MAX_STATE_BYTES  # byte budget of every stored shard
    levels: LevelSettings = field(default_factory=LevelSettings)
    flow: FlowSettings = field(default_factory=FlowSettings)
    # windows that only a tenant's job book speaks of (no telemetry) are filled in at most
    # this far back from the watermark: a jump in event time (a replay into topics that
    # held older data) would otherwise emit one window per window length of the gap
    job_fill_s: float = 7 * 86_400.0


class Partial(msgspec.Struct, frozen=True, array_like=True):
    """One snapshot's contribution to one tenant's window (compact on the wire)."""

    tenant: str
    window_start: float
    host: str
    seq: int
    ts: float
    samples: int
    instance_s: float
    gpu_s: float
    util_sum: float
    levels: tuple[int, int, int, int]
    weighted_s: float
    lost: int = 0


def window_start(ts: float, window_s: float) -> float:
    """Start of the tumbling window holding ``ts``: ``window_start(125, 60) -> 120.0``."""
    return math.floor(ts / window_s) * window_s


def split_snapshot(
    snap: HostSnapshot, cfg: WindowSettings, lost: int = 0, seq: int | None = None
) -> list[Partial]:
    """One :class:`Partial` per tenant with processes in ``snap``, in tenant order.

    ``lost`` is the number of snapshots of this host missing just before ``snap``
    (a seq gap); it is attributed to every tenant present in ``snap``. ``seq`` is the
    number its partials are deduped by (default: the snapshot's own ``seq``).
    """
    ws = window_start(snap.ts, cfg.window_s)
    level_of, weights = _levels(cfg.levels)
    gpus = {g.uuid: (g.util, g.mem_total) for g in snap.gpus}
    acc: dict[str, list[Any]] = {}
    for p in snap.procs:
        a = acc.get(p.tenant)
        if a is None:
            a = acc[p.tenant] = [0, set(), 0.0, [0, 0, 0, 0], 0.0]
        sm_util = p.sm_util
        gpu_util, mem_total = gpus.get(p.gpu, (sm_util, 0))
        i = level_of(gpu_util, sm_util, p.mem_used, mem_total)
        a[0] += 1
        a[1].add(p.gpu)
        a[2] += sm_util
        a[3][i] += 1
        a[4] += weights[i]
    dt = min(snap.interval_s, cfg.window_s)  # no snapshot covers more than its window
    return [
        Partial(
            tenant=tenant,
            window_start=ws,
            host=snap.host,
            seq=snap.seq if seq is None else seq,
            ts=snap.ts,
            samples=a[0],
            instance_s=a[0] * dt,
            gpu_s=len(a[1]) * dt,
            util_sum=a[2],
            levels=(a[3][0], a[3][1], a[3][2], a[3][3]),
            weighted_s=a[4] * dt,
            lost=lost,
        )
        for tenant, a in sorted(acc.items())
    ]


_LEVEL_RULES: dict[
    LevelSettings, tuple[Callable[[float, float, float, float], int], tuple[float, ...]]
] = {}


def _levels(
    lv: LevelSettings,
) -> tuple[Callable[[float, float, float, float], int], tuple[float, ...]]:
    """``(level_of, weights)`` for ``lv``: ``level_of(gpu_util, sm_util, mem_used,
    mem_total)`` is the index in :data:`LEVELS` of what :func:`classify` returns for a
    process (the same rules, its thresholds bound once: this runs for every process
    sample), ``weights`` the weight of each level in that order."""
    known = _LEVEL_RULES.get(lv)
    if known is not None:
        return known
    ex, l3, l1, l2 = (_LEVEL_INDEX[k] for k in ("EX", "L3", "L1", "L2"))
    ex_frac, l3_util, l3_sm = lv.ex_min_mem_frac, lv.l3_min_util_pct, lv.l3_min_sm_util_pct
    l1_util, l1_mem = lv.l1_max_util_pct, lv.l1_max_mem_bytes

    def level_of(gpu_util: float, sm_util: float, mem_used: float, mem_total: float) -> int:
        if mem_total > 0 and mem_used >= ex_frac * mem_total:
            return ex
        if gpu_util > l3_util and sm_util > l3_sm:
            return l3
        if gpu_util < l1_util and mem_used < l1_mem:
            return l1
        return l2

    rules = (level_of, tuple(lv.weight(level) for level in LEVELS))
    if len(_LEVEL_RULES) < 64:  # settings are few; never grow without bound
        _LEVEL_RULES[lv] = rules
    return rules


def initial(tenant: str, start: float) -> dict[str, Any]:
    """Empty state of one tenant's window starting at ``start``."""
    return {
        "tenant": tenant,
        "ws": start,
        "applied": {},
        "samples": 0,
        "instance_s": 0,
        "gpu_s": 0,
        "util_sum": 0,
        "levels": [0, 0, 0, 0],
        "weighted_s": 0,
        "lost": 0,
    }


def bytes_bound(state: dict[str, Any]) -> int:
    """Upper bound of ``state``'s stored size, from what it holds (not how it was built)."""
    return STATE_BASE_BYTES + HOST_ENTRY_BYTES * len(state["applied"])


def is_new_host(state: dict[str, Any], host: str) -> bool:
    """Whether ``host`` has no entry in ``state`` yet (adding it grows the state)."""
    applied = state["applied"]
    return digest(host) not in applied and host not in applied


def add(state: dict[str, Any], part: Partial) -> dict[str, Any]:
    """Fold ``part`` into ``state`` (returns a new dict; a replayed partial is a no-op)."""
    new = {**state, "applied": dict(state["applied"]), "levels": list(state["levels"])}
    return new if add_into(new, part) else state


def add_into(state: dict[str, Any], part: Partial) -> bool:
    """Fold ``part`` into ``state`` in place, in time independent of the window's size;
    ``False`` (and nothing changed) when its snapshot was already applied."""
    applied = state["applied"]
    key = digest(part.host)
    last = applied.get(key)
    if last is None:
        last = applied.get(part.host, -1)  # a host name: stored before digests
    if part.seq <= last:
        return False
    applied.pop(part.host, None)
    applied[key] = part.seq
    state["samples"] += part.samples
    state["instance_s"] += round(part.instance_s * MICRO)  # the sums of _SUMS
    state["gpu_s"] += round(part.gpu_s * MICRO)
    state["util_sum"] += round(part.util_sum * MICRO)
    state["weighted_s"] += round(part.weighted_s * MICRO)
    levels = state["levels"]
    a, b, c, d = part.levels
    levels[0] += a
    levels[1] += b
    levels[2] += c
    levels[3] += d
    state["lost"] += part.lost
    return True


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Combine two states of the same window built from disjoint hosts' partials."""
    if (a["tenant"], a["ws"]) != (b["tenant"], b["ws"]):
        raise ValueError("merge: states of different windows")
    overlap = set(a["applied"]) & set(b["applied"])
    if overlap:
        raise ValueError(f"merge: both states hold hosts {sorted(overlap)}")
    out = dict(a)
    out["applied"] = {**a["applied"], **b["applied"]}
    for k in ("samples", "instance_s", "gpu_s", "util_sum", "weighted_s", "lost"):
        out[k] = a[k] + b[k]
    out["levels"] = [x + y for x, y in zip(a["levels"], b["levels"], strict=True)]
    return out


def result(
    state: dict[str, Any],
    cfg: WindowSettings,
    *,
    pending_gpus: float = 0.0,
    scheduled_running_gpus: float = 0.0,
    quota_gpus: float | None = None,
    pending_effective_gpus: float | None = None,
    flow: JobFlow | None = None,
) -> TenantWindow:
    """The TenantWindow of a closed window. Same state and inputs, same window.

    ``pending_effective_gpus`` (the pending GPUs weighted by predicted level) defaults
    to every pending GPU at the weight of ``cfg.flow.unknown_level``.
    """
    w = cfg.window_s
    if pending_effective_gpus is None:
        pending_effective_gpus = cfg.levels.weight(cfg.flow.unknown_level) * pending_gpus
    gpus_busy = state["gpu_s"] / MICRO / w
    running = max(gpus_busy, scheduled_running_gpus)
    lv = state["levels"]
    return TenantWindow(
        tenant=state["tenant"],
        window_start=state["ws"],
        window_end=state["ws"] + w,
        hosts=len(state["applied"]),
        gpus_busy=gpus_busy,
        instances=state["instance_s"] / MICRO / w,
        util_sum=state["util_sum"] / MICRO,
        level_counts=LevelCounts(L1=lv[0], L2=lv[1], L3=lv[2], EX=lv[3]),
        effective_demand_gpus=state["weighted_s"] / MICRO / w + pending_effective_gpus,
        pending_gpus=float(pending_gpus),
        running_gpus=float(running),
        quota_gpus=quota_gpus,
        samples=state["samples"],
        lost_snapshots=state["lost"],
        flow=flow,
    )
