"""A tenant's GPU demand series as the messages a stream worker turns into windows.

Telemetry cannot say what waits and the scheduler does not say what runs per GPU, so a
demand point (running R, pending P, quota Q GPUs of one tenant) becomes both:

- **running**: a fleet of synthetic hosts of the tenant (``replay-TENANT-000``, ...,
  ``gpus_per_host`` GPUs each), sized by the quota when known (Q GPUs, as in Helios) and
  grown when R needs more; a fleet never shrinks. Every ``tick_s`` each host sends one
  HostSnapshot; the first R GPUs of the fleet carry one process of the tenant each, using
  the whole GPU (util 100 %, 95 % memory), so the worker levels it EX (weight 1.0) and a
  window of ``tick_s`` seconds reports ``gpus_busy = running_gpus = R``. The other GPUs are
  idle. Helios has no per-GPU utilisation, so "whole GPU" is an assumption.
- **quotas**: when a tenant's quota Q is known and changes (its first point included), a
  ClusterReport from source ``replay`` gives the planner the trace's real quota of that
  tenant and, as capacity, the sum of the latest quotas of every tenant with one (the
  replayed tenants are the cluster); a series without quotas reports nothing.
- **pending**: one synthetic job per tenant, ``TENANT/pending``, re-``submit``-ted with
  ``gpus = P`` whenever P changes, so the worker's job book reports ``pending_gpus = P``
  and ``effective_demand_gpus = R + w * P`` (the job carries no model attributes, so ``w``
  is the weight of the worker's ``unknown_pending_level``, EX = 1.0 by default).

A value holds until the tenant's next point: between points, snapshots repeat it every
``tick_s`` (one per point when the series is as fine as the tick, as Helios minutes are
with the default 60 s). Values are rounded to whole GPUs. Records come out in event-time
order across tenants. The readers bound tenant names so that the names derived from them
fit the schema (:data:`~dprobe.traces.row_input.MAX_TENANT_CHARS`); a fleet so large that
its GPU names would not (over a million hosts) is a ``UsageError``.

Example:
    >>> from dprobe.traces.demand_series import DemandPoint
    >>> pts = [DemandPoint(ts=0.0, tenant="a", running_gpus=3, pending_gpus=8, quota_gpus=16)]
    >>> recs = list(demand_records(pts, DemandLayout(tick_s=60, gpus_per_host=8)))
    >>> [(r.kind, r.key.decode()) for r in recs]  # doctest: +NORMALIZE_WHITESPACE
    [('cluster', 'replay'), ('jobs', 'a/pending'), ('samples', 'replay-a-000'),
     ('samples', 'replay-a-001')]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from dprobe.errors import UsageError
from dprobe.schema import ClusterReport, Gpu, HostSnapshot, JobEvent, Proc
from dprobe.traces.demand_series import DemandPoint
from dprobe.traces.replay_record import ReplayRecord
from dprobe.traces.row_input import MAX_ID_CHARS, replay_gpu, replay_host

GB = 1_000_000_000


@dataclass(frozen=True)
class DemandLayout:
    """How demand becomes synthetic telemetry (see the module docstring)."""

    tick_s: float = 60.0
    gpus_per_host: int = 8
    mem_total: int = 80 * GB
    pending_events: bool = True
    quota_reports: bool = True


@dataclass
class _Tenant:
    name: str
    running: int = 0
    pending: int | None = None
    quota: int | None = None
    hosts: int = 0
    seqs: list[int] = field(default_factory=list)
    next_tick: float = math.inf


def whole(gpus: float) -> int:
    """GPUs rounded to a whole number (half up). ``whole(2.5) == 3``."""
    return math.floor(gpus + 0.5)


def demand_records(
    points: Iterable[DemandPoint], layout: DemandLayout | None = None
) -> Iterator[ReplayRecord]:
    """Records of time-ordered ``points`` (any tenants), in event-time order."""
    lay = layout or DemandLayout()
    tenants: dict[str, _Tenant] = {}
    ticks: list[tuple[float, str]] = []  # (time, tenant); stale entries are skipped
    for pt in points:
        while ticks and ticks[0][0] < pt.ts:
            t, name = heapq.heappop(ticks)
            st = tenants[name]
            if t != st.next_tick:
                continue
            yield from _snapshots(st, t, lay)
            st.next_tick = t + lay.tick_s
            heapq.heappush(ticks, (st.next_tick, name))
        st = tenants.get(pt.tenant) or tenants.setdefault(pt.tenant, _Tenant(pt.tenant))
        st.running = whole(pt.running_gpus)
        need = max(st.running, whole(pt.quota_gpus or 0.0), 1)
        if lay.quota_reports and pt.quota_gpus is not None and whole(pt.quota_gpus) != st.quota:
            st.quota = whole(pt.quota_gpus)
            capacity = sum(t.quota for t in tenants.values() if t.quota is not None)
            yield ReplayRecord.of(
                ClusterReport(
                    ts=pt.ts,
                    source="replay",
                    capacity_gpus=float(capacity),
                    # every quota so far: one key, a compacted topic keeps only the last
                    quotas={
                        t.name: float(t.quota) for t in tenants.values() if t.quota is not None
                    },
                )
            )
        hosts = math.ceil(need / lay.gpus_per_host)
        if hosts > st.hosts:
            _check_names(pt, hosts - 1, lay)
            st.seqs += [0] * (hosts - st.hosts)
            st.hosts = hosts
        pending = whole(pt.pending_gpus)
        if lay.pending_events and pending != st.pending:
            st.pending = pending
            yield ReplayRecord.of(
                JobEvent(
                    ts=pt.ts,
                    event="submit",
                    job=f"{pt.tenant}/pending",
                    tenant=pt.tenant,
                    gpus=pending,
                )
            )
        yield from _snapshots(st, pt.ts, lay)
        st.next_tick = pt.ts + lay.tick_s
        heapq.heappush(ticks, (st.next_tick, pt.tenant))


def _check_names(pt: DemandPoint, host: int, lay: DemandLayout) -> None:
    """Refuse a new host whose GPU names the schema would refuse (the worker would
    dead-letter every snapshot of it)."""
    name = replay_gpu(replay_host(pt.tenant, host), lay.gpus_per_host - 1)
    if len(name) > MAX_ID_CHARS:
        where = f"{pt.path}:{pt.line}: " if pt.path else ""
        tenant = pt.tenant if len(pt.tenant) <= 40 else pt.tenant[:40] + "..."
        raise UsageError(
            f"{where}tenant {tenant!r}: the GPU names of synthetic host {host} would be "
            f"{len(name)} characters, more than the schema's {MAX_ID_CHARS} (too many "
            "hosts: give more --gpus-per-host)"
        )


def _snapshots(st: _Tenant, ts: float, lay: DemandLayout) -> Iterator[ReplayRecord]:
    busy_mem = int(lay.mem_total * 0.95)
    for h in range(st.hosts):
        host = replay_host(st.name, h)
        gpus = []
        procs = []
        for i in range(lay.gpus_per_host):
            uuid = replay_gpu(host, i)
            busy = h * lay.gpus_per_host + i < st.running
            gpus.append(
                Gpu(
                    uuid=uuid,
                    index=i,
                    util=100.0 if busy else 0.0,
                    mem_util=95.0 if busy else 0.0,
                    mem_used=busy_mem if busy else 0,
                    mem_total=lay.mem_total,
                    power_w=300.0 if busy else 50.0,
                )
            )
            if busy:
                procs.append(
                    Proc(
                        pid=10_000 + i,
                        gpu=uuid,
                        tenant=st.name,
                        job=f"{st.name}/running",
                        sm_util=100.0,
                        mem_util=95.0,
                        mem_used=busy_mem,
                    )
                )
        snap = HostSnapshot(
            host=host,
            ts=ts,
            interval_s=lay.tick_s,
            seq=st.seqs[h],
            gpus=tuple(gpus),
            procs=tuple(procs),
        )
        st.seqs[h] += 1
        yield ReplayRecord.of(snap)
