"""The stream worker's Prometheus exporter: a custom collector over :class:`WorkerStats`.

Everything is read at scrape time from in-memory state (the worker's ``WorkerStats`` and
the latest values of a :class:`~dprobe.sinks.consumer_lag.ConsumerLag`); a scrape never
talks to Kafka. Labels are bounded: tenant, level, horizon, quantile, action, reason, host,
and Kafka's consumergroup/topic/partition. A tenant's series exist only while the tenant
is in ``WorkerStats.tenants``: remove it there and its series leave the next scrape.

Names (dashboards and alerts depend on them):

- ``dprobe_tenant_demand_gpus{tenant}``: running + pending GPUs of the last closed window
- ``dprobe_tenant_effective_demand_gpus{tenant}``: level-weighted demand (DProbe)
- ``dprobe_tenant_level_instances{tenant,level}``: process samples per level L1/L2/L3/EX
  (an instance sampled all window counts ``window_s / interval_s`` times: read shares)
- ``dprobe_tenant_forecast_gpus{tenant,horizon,quantile}``: horizon in seconds ("3600"),
  quantile "0.5" or "0.9"
- ``dprobe_tenant_quota_gpus{tenant}``: current quota (absent while unknown)
- ``dprobe_forecast_abs_error_gpus{tenant,horizon}``: realised ``|p50 - actual|``
- ``dprobe_capacity_gpus``: the GPUs plans share (the scheduler's last report, else the
  ``capacity_gpus`` setting); only on the worker that plans
- counters ``dprobe_scaling_events_total{action}``, ``dprobe_deadletters_total{reason}``,
  ``dprobe_lost_snapshots_total{host}``, ``dprobe_conflicting_snapshots_total{host}``,
  ``dprobe_duplicate_snapshots_total``,
  ``dprobe_late_partials_total``, ``dprobe_late_job_events_total``,
  ``dprobe_windows_emitted_total``,
  ``dprobe_process_samples_total``, ``dprobe_snapshots_total``,
  ``dprobe_job_events_total``, ``dprobe_seq_resets_total``,
  ``dprobe_cluster_reports_total`` (scheduler reports taken by the planner),
  ``dprobe_non_finite_forecasts_total`` (NaN or infinite forecasts the planner replaced),
  ``dprobe_forgotten_tenants_total`` (tenants forgotten after ``forget_tenant_after_s``)
- ``dprobe_worker_event_loop_silent_seconds``: seconds since the worker's event loop last
  ran (:func:`export_loop_silence`; it beats every second, so 0 to 1 while it runs): a
  hung worker still answers scrapes, from the server's thread, and this says it is hung
- ``dprobe_processing_latency_seconds``: histogram, from the moment the watermark let a
  window close to its TenantWindow delivered, measured on this worker's monotonic clock
  (event time never enters it, so replays and accelerated clocks measure the same thing)
- ``dprobe_worker_consumer_lag{consumergroup,topic,partition}`` and
  ``dprobe_worker_consumer_lag_sum{consumergroup,topic}``: the group's lag on the
  partitions this worker holds (``WorkerStats.assigned``; all it measures when that is
  not tracked), so a partition's series shows which worker has it and sums across
  workers count each partition once; plus ``dprobe_consumer_lag_errors_total`` (failed
  lag refreshes: the values may be stale). The lag alerts and dashboards read
  kafka_exporter's names from ``dprobe lag`` (:mod:`dprobe.sinks.lag_exporter`), which
  goes on reporting when no worker runs; the worker's own names differ so the two never
  double.

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> from dprobe.sinks.worker_stats import TenantView, WorkerStats
    >>> stats, reg = WorkerStats(), CollectorRegistry()
    >>> _ = WorkerCollector(stats, registry=reg)
    >>> stats.tenants["vc-a"] = TenantView(demand_gpus=12.0)
    >>> reg.get_sample_value("dprobe_tenant_demand_gpus", {"tenant": "vc-a"})
    12.0
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from dprobe.schema import LEVELS
from dprobe.sinks.metrics_server import Heartbeat
from dprobe.sinks.worker_stats import Histogram, TenantView, WorkerStats

ACTIONS = ("scale_up", "scale_down")
# dead-letter reasons known in advance (schema.SchemaError reasons and the worker's own),
# exported at 0 so that increase() sees the first one; others appear when they happen
DEADLETTER_REASONS = (
    "oversized",
    "malformed_json",
    "unknown_version",
    "invalid_field",
    "inconsistent",
    "clock_skew",
    "wrong_key",
    "processing_error",
    "state_full",
)
QUANTILES = (("0.5", 0), ("0.9", 1))  # label value, index in the (p50, p90) pair


class LagSource(Protocol):
    """What the exporter reads from a lag poller (``ConsumerLag`` or a test fake)."""

    @property
    def group(self) -> str: ...

    @property
    def lags(self) -> Mapping[tuple[str, int], int]: ...

    @property
    def errors(self) -> int: ...


def horizon_label(horizon_s: float) -> str:
    """Horizon label in seconds: whole seconds without a decimal point.

    >>> horizon_label(3600.0), horizon_label(90.5)
    ('3600', '90.5')
    """
    h = float(horizon_s)
    return str(int(h)) if h.is_integer() else repr(h)


def export_loop_silence(heartbeat: Heartbeat, registry: CollectorRegistry) -> None:
    """Put ``dprobe_worker_event_loop_silent_seconds`` on ``registry``: the seconds since
    ``heartbeat`` last beat, read at each scrape.

    >>> reg, clock = CollectorRegistry(), [0.0]
    >>> export_loop_silence(Heartbeat(clock=lambda: clock[0]), reg)
    >>> clock[0] = 75.0
    >>> reg.get_sample_value("dprobe_worker_event_loop_silent_seconds")
    75.0
    """
    Gauge(
        "dprobe_worker_event_loop_silent_seconds",
        "Seconds since the worker's event loop last ran (it beats every second)",
        registry=registry,
    ).set_function(heartbeat.silent_s)


class WorkerCollector(Collector):
    """Exposes ``stats`` (and ``lag`` when given) to ``registry`` at every scrape.

    ``registry=None`` builds an unregistered collector (register it yourself).
    """

    def __init__(
        self,
        stats: WorkerStats,
        *,
        registry: CollectorRegistry | None,
        lag: LagSource | None = None,
    ) -> None:
        self.stats = stats
        self.lag = lag
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterator[Metric]:
        """The families this collector owns (names only), so clashes fail at register."""
        yield from _tenant_families()
        yield from _counter_families(WorkerStats())
        yield _latency_family(Histogram())
        yield from _lag_families("", {}, 0)

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        tenants = s.tenants.copy()  # the event loop may add a tenant during a scrape
        families = _tenant_families()
        for tenant, view in sorted(tenants.items()):
            _add_tenant(families, tenant, view)
        yield from families
        yield from _counter_families(s)
        yield _latency_family(s.delay)
        if self.lag is not None:
            lags, held = self.lag.lags, s.assigned
            if held is not None:  # the partitions it holds: sums across workers add up
                lags = {tp: n for tp, n in lags.items() if tp in held}
            yield from _lag_families(self.lag.group, lags, self.lag.errors)


def _tenant_families() -> list[GaugeMetricFamily]:
    return [
        GaugeMetricFamily(
            "dprobe_tenant_demand_gpus",
            "Running + pending GPUs of the tenant's last closed window",
            labels=["tenant"],
        ),
        GaugeMetricFamily(
            "dprobe_tenant_effective_demand_gpus",
            "Level-weighted (DProbe multi-level) demand of the last closed window",
            labels=["tenant"],
        ),
        GaugeMetricFamily(
            "dprobe_tenant_level_instances",
            "Process samples per utilisation level in the last closed window (an instance "
            "running all window counts once per collector tick)",
            labels=["tenant", "level"],
        ),
        GaugeMetricFamily(
            "dprobe_tenant_forecast_gpus",
            "Forecast demand by horizon (seconds) and quantile",
            labels=["tenant", "horizon", "quantile"],
        ),
        GaugeMetricFamily(
            "dprobe_tenant_quota_gpus", "Current GPU quota of the tenant", labels=["tenant"]
        ),
        GaugeMetricFamily(
            "dprobe_forecast_abs_error_gpus",
            "Realised absolute error |p50 - actual| of the forecast by horizon (seconds)",
            labels=["tenant", "horizon"],
        ),
    ]


def _add_tenant(families: list[GaugeMetricFamily], tenant: str, v: TenantView) -> None:
    demand, effective, levels, forecast, quota, error = families
    demand.add_metric([tenant], v.demand_gpus)
    effective.add_metric([tenant], v.effective_demand_gpus)
    counts = v.level_counts.copy()
    for level in LEVELS:
        levels.add_metric([tenant, level], counts.get(level, 0))
    for horizon, pair in sorted(v.forecast.copy().items()):
        for quantile, i in QUANTILES:
            forecast.add_metric([tenant, horizon_label(horizon), quantile], pair[i])
    if v.quota_gpus is not None:
        quota.add_metric([tenant], v.quota_gpus)
    for horizon, value in sorted(v.abs_error.copy().items()):
        error.add_metric([tenant, horizon_label(horizon)], value)


def _counter_families(s: WorkerStats) -> Iterator[Metric]:
    events = CounterMetricFamily(
        "dprobe_scaling_events", "Scaling events produced, by action", labels=["action"]
    )
    produced = s.scaling_events.copy()
    for action in sorted(set(ACTIONS) | set(produced)):
        events.add_metric([action], produced.get(action, 0))
    yield events
    dead = CounterMetricFamily(
        "dprobe_deadletters", "Records sent to the dead-letter topic", labels=["reason"]
    )
    by_reason = dict.fromkeys(DEADLETTER_REASONS, 0) | s.dead_letters.copy()
    for reason, n in sorted(by_reason.items()):
        dead.add_metric([reason], n)
    yield dead
    lost = CounterMetricFamily(
        "dprobe_lost_snapshots",
        "Snapshots missing from a host's seq (a gap of n seqs counts n)",
        labels=["host"],
    )
    for host, n in sorted(s.lost_snapshots.copy().items()):
        lost.add_metric([host], n)
    yield lost
    conflicting = CounterMetricFamily(
        "dprobe_conflicting_snapshots",
        "Snapshots dropped because their host's seq was already taken at an older time: a "
        "second collector under the host id, or one restarted with a fresh state_dir",
        labels=["host"],
    )
    for host, n in sorted(s.conflicting_snapshots.copy().items()):
        conflicting.add_metric([host], n)
    yield conflicting
    for name, doc, value in (
        ("dprobe_duplicate_snapshots", "Snapshots dropped as (host, seq) duplicates", s.duplicates),
        ("dprobe_late_partials", "Partial windows that arrived after their window closed",
         s.late_partials),
        ("dprobe_late_job_events", "Job events that arrived after their window closed "
         "(the job book takes them; that window's flow misses them)", s.late_job_events),
        ("dprobe_windows_emitted", "TenantWindows produced", s.windows_emitted),
        ("dprobe_process_samples", "GPU process samples ingested", s.process_samples),
        ("dprobe_snapshots", "Host snapshots ingested", s.snapshots),
        ("dprobe_job_events", "Scheduler job events ingested", s.job_events),
        ("dprobe_seq_resets", "Hosts whose snapshot seq restarted", s.resets),
        ("dprobe_cluster_reports", "Scheduler reports (capacity, quotas) the planner took",
         s.cluster_reports),
        ("dprobe_non_finite_forecasts", "NaN or infinite forecasts, each planned as the "
         "tenant's demand now instead", s.non_finite_forecasts),
        ("dprobe_forgotten_tenants", "Tenants the planner forgot after forget_tenant_after_s "
         "without a window", s.forgotten_tenants),
    ):  # fmt: skip
        yield CounterMetricFamily(name, doc, value=value)
    capacity = GaugeMetricFamily(
        "dprobe_capacity_gpus", "GPUs the plans share (the scheduler's report, else the setting)"
    )
    if s.capacity_gpus is not None:
        capacity.add_metric([], s.capacity_gpus)
    yield capacity


def _latency_family(h: Histogram) -> HistogramMetricFamily:
    counts = list(h.counts)  # one copy, so buckets, count and sum agree
    buckets: list[tuple[str, float]] = []
    cumulative = 0
    for bound, n in zip((*h.bounds, float("inf")), counts, strict=True):
        cumulative += n
        buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
    return HistogramMetricFamily(
        "dprobe_processing_latency_seconds",
        "Seconds from the moment the watermark let a window close to its TenantWindow delivered",
        buckets=buckets,
        sum_value=h.total,
    )


def _lag_families(group: str, lags: Mapping[tuple[str, int], int], errors: int) -> Iterator[Metric]:
    per_partition = GaugeMetricFamily(
        "dprobe_worker_consumer_lag",
        "End offset minus committed offset per partition, as this worker measures it",
        labels=["consumergroup", "topic", "partition"],
    )
    total = GaugeMetricFamily(
        "dprobe_worker_consumer_lag_sum",
        "Lag of the consumer group summed over a topic's partitions, as this worker measures it",
        labels=["consumergroup", "topic"],
    )
    sums: dict[str, int] = {}
    for (topic, partition), lag in sorted(dict(lags).items()):
        per_partition.add_metric([group, topic, str(partition)], lag)
        sums[topic] = sums.get(topic, 0) + lag
    for topic, lag in sums.items():
        total.add_metric([group, topic], lag)
    yield per_partition
    yield total
    yield CounterMetricFamily(
        "dprobe_consumer_lag_errors",
        "Lag refreshes that failed (the lag values are then from the last success)",
        value=errors,
    )
