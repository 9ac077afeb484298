"""The collector's own Prometheus metrics, in a registry the caller injects.

Names and meanings (all prefixed ``dprobe_collector_``):

- ``snapshots_total``: snapshots taken (each one is spooled, then sent)
- ``sent_snapshots_total``: snapshots Kafka confirmed
- ``backend_errors_total{backend,kind}``: backend (NVML) errors by kind, e.g.
  ``timeout``, ``gpu_lost``, ``no_driver``, ``driver_mismatch``, ``busy`` (each
  kind of :data:`BACKEND_ERROR_KINDS` is there from the start, at 0)
- ``sample_faults_total{kind}``: bad values cleaned from readings (``nan``, ``negative``,
  ``out_of_range``), processes that vanished mid-sample (``proc_vanished``), processes on
  a GPU not in the reading (``orphan_proc``), a GPU read twice (``duplicate_gpu``) and
  corrupt spool bytes (``spool_corrupt``)
- ``send_errors_total{kind}``: failed connects and deliveries
- ``send_latency_seconds``: time from sending a batch to Kafka's confirmation
- ``spool_bytes`` / ``spool_pending_snapshots``: undelivered data on disk (read at scrape)
- ``dropped_snapshots_total{reason}``: snapshots lost for good (``spool_full``,
  ``spool_corrupt``, ``disk_full``: the disk had no room to spool one, ``too_large``:
  Kafka refuses one as larger than the topic takes)
- ``kafka_up``: 1 while the last delivery succeeded
- ``kafka_auth_failed``: 1 while Kafka refuses the collector's SASL credentials
- ``gpus`` / ``processes``: GPUs and processes in the last snapshot
- ``tick_seconds``: wall time of one tick (read, attribute, encode, spool)

Labelled counters start at 0 for every kind known in advance (so ``increase()`` sees the
first error). Per-GPU and per-tenant gauges of the last snapshot, with dcgm-exporter's
label names: :mod:`dprobe.collectors.fleet_metrics` (``fleet``).

``MetricsServer`` (shared with the worker, from ``dprobe.sinks.metrics_server``) serves them.

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> reg = CollectorRegistry()
    >>> m = CollectorMetrics(reg)
    >>> m.sample_faults.labels(kind="nan").inc()
    >>> reg.get_sample_value("dprobe_collector_sample_faults_total", {"kind": "nan"})
    1.0
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dprobe.collectors.fleet_metrics import FleetGauges
from dprobe.sinks.metrics_server import MetricsServer

__all__ = ["CollectorMetrics", "MetricsServer"]

SAMPLE_FAULT_KINDS = (
    "nan",
    "negative",
    "out_of_range",
    "proc_vanished",
    "orphan_proc",
    "duplicate_gpu",
    "spool_corrupt",
)
SEND_ERROR_KINDS = ("connect", "auth", "timeout")
DROP_REASONS = ("spool_full", "spool_corrupt", "disk_full", "too_large")
BACKEND_ERROR_KINDS = (
    "timeout",
    "gpu_lost",
    "no_driver",
    "driver_mismatch",
    "uninitialized",
    "no_permission",
    "not_found",
    "busy",
    "other",
    "unexpected",
)
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class CollectorMetrics:
    """Every metric of one collector, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        p = "dprobe_collector_"
        kw: dict[str, Any] = {"registry": registry}
        self.snapshots = Counter(f"{p}snapshots", "Snapshots taken", **kw)
        self.sent = Counter(f"{p}sent_snapshots", "Snapshots confirmed by Kafka", **kw)
        self.backend_errors = Counter(
            f"{p}backend_errors", "GPU backend (NVML) errors by kind", ["backend", "kind"], **kw
        )
        self.sample_faults = Counter(
            f"{p}sample_faults", "Bad values or vanished processes in readings", ["kind"], **kw
        )
        self.send_errors = Counter(
            f"{p}send_errors", "Failed Kafka connects or deliveries", ["kind"], **kw
        )
        self.send_latency = Histogram(
            f"{p}send_latency_seconds", "Batch send to confirmation", buckets=_LATENCY_BUCKETS, **kw
        )
        self.spool_bytes = Gauge(f"{p}spool_bytes", "Undelivered bytes in the disk spool", **kw)
        self.spool_pending = Gauge(
            f"{p}spool_pending_snapshots", "Undelivered snapshots in the disk spool", **kw
        )
        self.dropped = Counter(f"{p}dropped_snapshots", "Snapshots lost for good", ["reason"], **kw)
        self.kafka_up = Gauge(f"{p}kafka_up", "1 while the last delivery to Kafka succeeded", **kw)
        self.kafka_auth_failed = Gauge(
            f"{p}kafka_auth_failed",
            "1 while Kafka refuses the collector's SASL credentials (it spools meanwhile)",
            **kw,
        )
        self.gpus = Gauge(f"{p}gpus", "GPUs in the last snapshot", **kw)
        self.processes = Gauge(f"{p}processes", "GPU processes in the last snapshot", **kw)
        self.tick_seconds = Histogram(
            f"{p}tick_seconds", "Wall time of one tick", buckets=_LATENCY_BUCKETS, **kw
        )
        self.fleet = FleetGauges(registry=registry)
        for kind in SAMPLE_FAULT_KINDS:
            self.sample_faults.labels(kind=kind)
        for kind in SEND_ERROR_KINDS:
            self.send_errors.labels(kind=kind)
        for reason in DROP_REASONS:
            self.dropped.labels(reason=reason)

    def known_backend(self, backend: str) -> None:
        """Export ``backend``'s error counters at 0 for every kind known in advance."""
        for kind in BACKEND_ERROR_KINDS:
            self.backend_errors.labels(backend=backend, kind=kind)
