"""The collector's /metrics endpoint."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry

from dprobe.collectors.metrics import CollectorMetrics, MetricsServer


def test_metrics_are_served_on_loopback_from_the_injected_registry() -> None:
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    metrics.backend_errors.labels(backend="nvml", kind="gpu_lost").inc(2)
    pending = {"n": 7}
    metrics.spool_pending.set_function(lambda: pending["n"])
    server = MetricsServer(registry, port=0)
    assert server.addr == "127.0.0.1"
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        first = urllib.request.urlopen(url, timeout=5).read().decode()
        pending["n"] = 3  # read at scrape time, not when set
        second = urllib.request.urlopen(url, timeout=5).read().decode()
    finally:
        server.stop()
        server.stop()
    assert 'dprobe_collector_backend_errors_total{backend="nvml",kind="gpu_lost"} 2.0' in first
    assert "dprobe_collector_spool_pending_snapshots 7.0" in first
    assert "dprobe_collector_spool_pending_snapshots 3.0" in second
    assert "process_cpu_seconds_total" not in first  # own registry, nothing global
