"""What the worker saw and decided, kept for the Prometheus exporter to read at scrape time.

Plain in-process numbers (per worker process) with bounded keys: hosts (those with a
lost or conflicting snapshot in the last day), reasons, tenants, horizons. The worker's agents
(:mod:`dprobe.streams`) write; the exporter (:mod:`dprobe.sinks.worker_metrics`) only
reads.

Example:
    >>> s = WorkerStats()
    >>> s.dead_letter("malformed_json"); s.dead_letters["malformed_json"]
    1
    >>> s.observe_delay(1.5); s.delay.count, s.delay.counts[LATENCY_BUCKETS_S.index(2.0)]
    (1, 1)
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

LOST_HOST_TTL_S = 86_400.0  # a host with no lost (conflicting) snapshot this long leaves them

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
)


@dataclass
class Histogram:
    """Cumulative-bucket histogram data (what a Prometheus histogram needs), no library."""

    bounds: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1


@dataclass
class TenantView:
    """The latest of one tenant: its last window, forecasts, quota and realised error."""

    demand_gpus: float = 0.0  # running + pending GPUs of the last closed window
    effective_demand_gpus: float = 0.0
    level_counts: dict[str, int] = field(default_factory=dict)
    window_end: float = 0.0
    forecast: dict[float, tuple[float, float]] = field(default_factory=dict)  # horizon -> p50, p90
    quota_gpus: float | None = None
    abs_error: dict[float, float] = field(default_factory=dict)  # horizon -> |p50 - actual|


@dataclass
class WorkerStats:
    snapshots: int = 0
    process_samples: int = 0
    duplicates: int = 0
    resets: int = 0
    late_partials: int = 0
    late_job_events: int = 0  # applied to the job book after their window was out
    job_events: int = 0
    cluster_reports: int = 0  # scheduler reports taken by the planner on this worker
    capacity_gpus: float | None = None  # what plans share (None: this worker does not plan)
    # (topic, partition) this worker holds now, set at each rebalance; None: not tracked
    assigned: frozenset[tuple[str, int]] | None = None
    windows_emitted: int = 0
    non_finite_forecasts: int = 0  # NaN or infinite forecasts, planned as demand now instead
    forgotten_tenants: int = 0  # tenants forgotten after forget_tenant_after_s of silence
    lost_snapshots: Counter[str] = field(default_factory=Counter)  # by host (see lose())
    _lost_at: dict[str, float] = field(default_factory=dict, repr=False)
    # duplicates with a newer time than the host's newest snapshot, by host (see conflict())
    conflicting_snapshots: Counter[str] = field(default_factory=Counter)
    _conflict_at: dict[str, float] = field(default_factory=dict, repr=False)
    dead_letters: Counter[str] = field(default_factory=Counter)  # by reason
    scaling_events: Counter[str] = field(default_factory=Counter)  # by action
    delay: Histogram = field(default_factory=Histogram)  # window end -> TenantWindow produced
    tenants: dict[str, TenantView] = field(default_factory=dict)

    def lose(self, host: str, n: int, now: float) -> None:
        """Count ``n`` snapshots of ``host`` lost at ``now`` (monotonic seconds); hosts
        with no loss for :data:`LOST_HOST_TTL_S` are forgotten, so hosts that came and
        went (autoscaled nodes) do not keep a series each for the life of the worker."""
        _count_recent(self.lost_snapshots, self._lost_at, host, n, now)

    def conflict(self, host: str, now: float) -> None:
        """Count one snapshot of ``host`` dropped at ``now`` as a conflict (a ``seq`` seen
        before, with a newer time: a second sender under its id); forgotten as :meth:`lose`."""
        self.duplicates += 1
        _count_recent(self.conflicting_snapshots, self._conflict_at, host, 1, now)

    def dead_letter(self, reason: str) -> None:
        self.dead_letters[reason] += 1

    def observe_delay(self, seconds: float) -> None:
        """Seconds from the moment a window could close to its TenantWindow delivered."""
        self.delay.observe(seconds)


def _count_recent(
    counts: Counter[str], last_at: dict[str, float], host: str, n: int, now: float
) -> None:
    """Add ``n`` to ``counts[host]`` at ``now``; drop hosts last counted over
    :data:`LOST_HOST_TTL_S` before ``now`` (``last_at`` keeps hosts oldest first)."""
    counts[host] += n
    last_at.pop(host, None)
    last_at[host] = now  # insertion order = order of the last count
    for old, at in list(last_at.items()):
        if now - at <= LOST_HOST_TTL_S:
            break
        del last_at[old]
        del counts[old]
