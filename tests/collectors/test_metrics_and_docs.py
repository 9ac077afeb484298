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


async def test_per_gpu_and_per_tenant_gauges_follow_the_last_snapshot(tmp_path) -> None:
    """dcgm-exporter's label names plus tenant; values recomputed here from the snapshot;
    error counters exist at 0 before the first error."""
    from dprobe.clock import ManualClock
    from dprobe.collectors.assemble import build_collector
    from dprobe.collectors.synthetic import SyntheticBackend
    from dprobe.config import CollectorSettings

    settings = CollectorSettings(
        host_id="node-1", interval_s=1.0, spool_dir=tmp_path / "spool",
        state_dir=tmp_path / "state", spool_fsync=False,
    )  # fmt: skip
    registry = CollectorRegistry()
    clock = ManualClock()
    backend = SyntheticBackend(gpus=4, procs_per_gpu=3, clock=clock)
    seen = []
    c = build_collector(
        settings, registry=registry, clock=clock, backend=backend, send=False, max_ticks=2,
        on_snapshot=seen.append,
    )  # fmt: skip
    async with c:
        await c.wait()
    snap = seen[-1]
    for g in snap.gpus:
        labels = {"gpu": str(g.index), "UUID": g.uuid, "Hostname": "node-1"}
        found = [
            s for fam in registry.collect() if fam.name == "dprobe_gpu_utilization_percent"
            for s in fam.samples if all(s.labels.get(k) == v for k, v in labels.items())
        ]  # fmt: skip
        assert len(found) == 1 and found[0].value == g.util and "modelName" in found[0].labels
    tenants = {p.tenant for p in snap.procs}
    for t in tenants:
        mine = [p for p in snap.procs if p.tenant == t]
        labels = {"tenant": t, "Hostname": "node-1"}
        assert registry.get_sample_value("dprobe_tenant_processes", labels) == len(mine)
        assert registry.get_sample_value("dprobe_tenant_gpus", labels) == len({p.gpu for p in mine})
        assert registry.get_sample_value("dprobe_tenant_gpu_memory_used_bytes", labels) == sum(
            p.mem_used for p in mine
        )
    zero = {
        ("dprobe_collector_send_errors_total", (("kind", "connect"),)),
        ("dprobe_collector_dropped_snapshots_total", (("reason", "spool_full"),)),
        ("dprobe_collector_dropped_snapshots_total", (("reason", "spool_corrupt"),)),
        ("dprobe_collector_dropped_snapshots_total", (("reason", "disk_full"),)),
        ("dprobe_collector_sample_faults_total", (("kind", "nan"),)),
        ("dprobe_collector_backend_errors_total", (("backend", "synthetic"), ("kind", "timeout"))),
        (
            "dprobe_collector_backend_errors_total",
            (("backend", "synthetic"), ("kind", "no_driver")),
        ),
        (
            "dprobe_collector_backend_errors_total",
            (("backend", "synthetic"), ("kind", "driver_mismatch")),
        ),
    }
    for name, labels in zero:
        assert registry.get_sample_value(name, dict(labels)) == 0.0, name
