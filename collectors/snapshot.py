"""Turn a raw backend :class:`Reading` into a valid :class:`HostSnapshot`.

Readings are untrusted: a NaN or infinite value becomes 0, a negative value 0, a value
above its bound the bound (``mem_used`` at most ``mem_total``); each repair is reported
to ``on_fault`` with its kind (``nan``, ``negative``, ``out_of_range``). Processes the
backend did not attribute are resolved to a tenant and job from their pid; a process that
ended in the meantime, or could not be attributed, is kept as ``unassigned``
(``proc_vanished``); a process on a GPU that is not in the reading (``orphan_proc``) and
a repeated GPU (``duplicate_gpu``) are left out, and so is a GPU whose UUID is longer than
the contract's 256 characters (``out_of_range``); a longer model name is cut, and a MIG
parent or batch size the contract refuses is dropped (``out_of_range``). So every
snapshot passes the contract, whatever the backend read.

Example:
    >>> from dprobe.collectors.backend import GpuReading, ProcReading, Reading
    >>> faults = []
    >>> build = SnapshotBuilder("h1", resolver=None, on_fault=faults.append)
    >>> r = Reading(gpus=[GpuReading("GPU-0", 0, float("nan"), 5, 1, 2, 100)],
    ...             procs=[ProcReading(1, "GPU-0", -3, 0, 1, tenant="vc-a", job="j")])
    >>> snap = build(r, seq=7, ts=1e9, interval_s=1.0)
    >>> snap.gpus[0].util, snap.procs[0].sm_util, faults
    (0.0, 0.0, ['nan', 'negative'])
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dprobe.collectors.backend import Reading
from dprobe.collectors.errors import ProcessGone
from dprobe.collectors.tenants import TenantResolver
from dprobe.schema import MAX_BATCH, MAX_ID_CHARS, MAX_PID, UNASSIGNED, Gpu, HostSnapshot, Proc

_MAX_BYTES = float(2**53)


class SnapshotBuilder:
    """Callable: ``builder(reading, seq=, ts=, interval_s=) -> HostSnapshot``."""

    def __init__(
        self,
        host: str,
        resolver: TenantResolver | None,
        on_fault: Callable[[str], None],
    ) -> None:
        self.host = host
        self.resolver = resolver
        self.on_fault = on_fault

    def _num(self, value: float, hi: float) -> float:
        if not math.isfinite(value):
            self.on_fault("nan")
            return 0.0
        if value < 0:
            self.on_fault("negative")
            return 0.0
        if value > hi:
            self.on_fault("out_of_range")
            return hi
        return float(value)

    def _parent(self, uuid: str | None) -> str | None:
        """A MIG parent's UUID, or None (counted) where the contract cannot hold it."""
        if uuid is not None and not 0 < len(uuid) <= MAX_ID_CHARS:
            self.on_fault("out_of_range")
            return None
        return uuid

    def _batch(self, size: int | None) -> int | None:
        """A batch size the contract holds, or None (counted when above its bound)."""
        if size is None or size < 1:
            return None
        if size > MAX_BATCH:
            self.on_fault("out_of_range")
            return None
        return size

    def __call__(self, reading: Reading, *, seq: int, ts: float, interval_s: float) -> HostSnapshot:
        num = self._num
        gpus: list[Gpu] = []
        seen: set[str] = set()
        for g in reading.gpus:
            if g.uuid in seen or not g.uuid:
                self.on_fault("duplicate_gpu")
                continue
            if len(g.uuid) > MAX_ID_CHARS:  # no id a consumer could hold: cut, two could clash
                self.on_fault("out_of_range")
                continue
            seen.add(g.uuid)
            total = int(num(g.mem_total, _MAX_BYTES))
            gpus.append(
                Gpu(
                    uuid=g.uuid,
                    index=int(num(g.index, 4096)),
                    util=num(g.util, 100.0),
                    mem_util=num(g.mem_util, 100.0),
                    mem_used=int(num(g.mem_used, total)),
                    mem_total=total,
                    power_w=num(g.power_w, 100_000.0),
                    sm_clock_mhz=None if g.sm_clock_mhz is None else num(g.sm_clock_mhz, 100_000.0),
                    mig_parent=self._parent(g.mig_parent),
                    name=g.name[:MAX_ID_CHARS] if g.name else None,
                )
            )
        procs: list[Proc] = []
        for p in reading.procs:
            if p.gpu not in seen:
                self.on_fault("orphan_proc")
                continue
            tenant, job = p.tenant, p.job
            if not tenant or not job:
                if self.resolver is None:
                    tenant, job = tenant or UNASSIGNED, job or f"pid-{p.pid}"
                else:
                    try:
                        who = self.resolver.resolve(p.pid)
                        tenant, job = tenant or who.tenant, job or who.job
                    except ProcessGone:
                        # it held the GPU when the backend listed it: keep it, unattributed
                        self.on_fault("proc_vanished")
                        tenant, job = tenant or UNASSIGNED, job or f"pid-{p.pid}"
            if not 0 <= p.pid <= MAX_PID:
                self.on_fault("out_of_range")
                continue
            procs.append(
                Proc(
                    pid=p.pid,
                    gpu=p.gpu,
                    tenant=tenant[:MAX_ID_CHARS],
                    job=job[:MAX_ID_CHARS],
                    sm_util=num(p.sm_util, 100.0),
                    mem_util=num(p.mem_util, 100.0),
                    mem_used=int(num(p.mem_used, _MAX_BYTES)),
                    model=p.model[:MAX_ID_CHARS] if p.model is not None else None,
                    batch_size=self._batch(p.batch_size),
                    amp=p.amp,
                )
            )
        if self.resolver is not None:
            self.resolver.retain(p.pid for p in procs)
        return HostSnapshot(
            host=self.host,
            ts=ts,
            interval_s=interval_s,
            seq=seq,
            gpus=tuple(gpus),
            procs=tuple(procs),
        )
