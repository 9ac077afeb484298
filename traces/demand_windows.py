"""Turn time-ordered :class:`DemandPoint` records into closed :class:`TenantWindow` s.

Points are bucketed into tumbling windows of ``window_s`` seconds aligned to the epoch
(``[k*window_s, (k+1)*window_s)``). A window's running, pending and quota GPUs are the
means of its points (a minute series aggregated to 10-minute windows gives the average
demand of those 10 minutes). Windows are emitted in time order once the stream has moved
past them; a tenant with no point in a window gets no window (a *missing* window).

Fields a demand series does not know (hosts, instances, utilisation, levels) are zero;
``effective_demand_gpus`` is set to the demand (running + pending), since without
per-instance telemetry every GPU counts whole.

Example:
    >>> from dprobe.traces.demand_series import DemandPoint
    >>> pts = [DemandPoint(ts=t, tenant="a", running_gpus=t / 60, pending_gpus=0.0)
    ...        for t in range(0, 1200, 60)]
    >>> [(w.window_start, w.running_gpus) for w in to_windows(pts, 600)]
    [(0.0, 4.5), (600.0, 14.5)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dprobe.schema import LevelCounts, TenantWindow
from dprobe.traces.demand_series import DemandPoint


@dataclass(slots=True)
class _Acc:
    n: int = 0
    running: float = 0.0
    pending: float = 0.0
    quota: float = 0.0
    quota_n: int = 0


def to_windows(points: Iterable[DemandPoint], window_s: float) -> Iterator[TenantWindow]:
    """Closed windows of ``window_s`` seconds from time-ordered ``points`` (see module doc)."""
    if not window_s > 0:
        raise ValueError("window_s must be > 0")
    open_: dict[int, dict[str, _Acc]] = {}
    current = -math.inf
    for pt in points:
        bucket = math.floor(pt.ts / window_s)
        if bucket > current:
            yield from _flush(open_, bucket, window_s)
            current = bucket
        acc = open_.setdefault(bucket, {}).setdefault(pt.tenant, _Acc())
        acc.n += 1
        acc.running += pt.running_gpus
        acc.pending += pt.pending_gpus
        if pt.quota_gpus is not None:
            acc.quota += pt.quota_gpus
            acc.quota_n += 1
    yield from _flush(open_, math.inf, window_s)


def _flush(
    open_: dict[int, dict[str, _Acc]], before: float, window_s: float
) -> Iterator[TenantWindow]:
    for bucket in sorted(b for b in open_ if b < before):
        for tenant, acc in sorted(open_.pop(bucket).items()):
            running = acc.running / acc.n
            pending = acc.pending / acc.n
            yield TenantWindow(
                tenant=tenant,
                window_start=float(bucket * window_s),
                window_end=float((bucket + 1) * window_s),
                hosts=0,
                gpus_busy=running,
                instances=0.0,
                util_sum=0.0,
                level_counts=LevelCounts(),
                effective_demand_gpus=running + pending,
                pending_gpus=pending,
                running_gpus=running,
                quota_gpus=acc.quota / acc.quota_n if acc.quota_n else None,
                samples=acc.n,
            )
