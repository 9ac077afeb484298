"""The worker's exporter: exact values and labels from a populated WorkerStats, read at
scrape time, tenant series removed with the tenant, served over HTTP."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from dprobe.sinks.metrics_server import MetricsServer
from dprobe.sinks.worker_metrics import WorkerCollector, horizon_label
from dprobe.sinks.worker_stats import TenantView, WorkerStats


@dataclass
class FakeLag:
    group: str = "dprobe-worker"
    lags: Mapping[tuple[str, int], int] = field(default_factory=dict)
    errors: int = 0


def _populated() -> WorkerStats:
    s = WorkerStats()
    s.snapshots, s.process_samples, s.duplicates, s.late_partials = 40, 320, 3, 2
    s.late_job_events = 5
    s.forgotten_tenants = 6
    s.windows_emitted, s.job_events, s.resets = 11, 5, 1
    s.lost_snapshots["gpu-7"] += 4
    s.conflicting_snapshots["gpu-2"] += 6
    s.dead_letter("malformed_json")
    s.dead_letter("malformed_json")
    s.dead_letter("oversized")
    s.scaling_events["scale_up"] += 2
    for delay in (0.04, 0.3, 0.5, 7.0, 400.0):
        s.observe_delay(delay)
    s.tenants["vc-a"] = TenantView(
        demand_gpus=24.0,
        effective_demand_gpus=13.5,
        level_counts={"L1": 5, "L3": 9},
        forecast={600.0: (20.0, 26.0), 3600.0: (22.5, 30.0)},
        quota_gpus=32.0,
        abs_error={600.0: 1.5},
    )
    s.tenants["vc-b"] = TenantView(demand_gpus=8.0, effective_demand_gpus=4.0)
    return s


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client import generate_latest

    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _get(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_tenant_series_have_exact_values_and_labels() -> None:
    reg = CollectorRegistry()
    WorkerCollector(_populated(), registry=reg)
    m = _scrape(reg)
    assert _get(m, "dprobe_tenant_demand_gpus", tenant="vc-a") == 24.0
    assert _get(m, "dprobe_tenant_effective_demand_gpus", tenant="vc-a") == 13.5
    levels = {lv: _get(m, "dprobe_tenant_level_instances", tenant="vc-a", level=lv) for lv in
              ("L1", "L2", "L3", "EX")}  # fmt: skip
    assert levels == {"L1": 5.0, "L2": 0.0, "L3": 9.0, "EX": 0.0}
    forecast = {(k[1]): v for k, v in m.items() if k[0] == "dprobe_tenant_forecast_gpus"}
    assert forecast == {
        frozenset({("tenant", "vc-a"), ("horizon", "600"), ("quantile", "0.5")}): 20.0,
        frozenset({("tenant", "vc-a"), ("horizon", "600"), ("quantile", "0.9")}): 26.0,
        frozenset({("tenant", "vc-a"), ("horizon", "3600"), ("quantile", "0.5")}): 22.5,
        frozenset({("tenant", "vc-a"), ("horizon", "3600"), ("quantile", "0.9")}): 30.0,
    }
    assert _get(m, "dprobe_tenant_quota_gpus", tenant="vc-a") == 32.0
    assert _get(m, "dprobe_tenant_quota_gpus", tenant="vc-b") is None  # quota unknown
    assert _get(m, "dprobe_forecast_abs_error_gpus", tenant="vc-a", horizon="600") == 1.5
    assert _get(m, "dprobe_tenant_demand_gpus", tenant="vc-b") == 8.0


def test_counters_and_latency_histogram() -> None:
    reg = CollectorRegistry()
    WorkerCollector(_populated(), registry=reg)
    m = _scrape(reg)
    assert _get(m, "dprobe_scaling_events_total", action="scale_up") == 2.0
    assert _get(m, "dprobe_scaling_events_total", action="scale_down") == 0.0
    assert _get(m, "dprobe_deadletters_total", reason="malformed_json") == 2.0
    assert _get(m, "dprobe_deadletters_total", reason="oversized") == 1.0
    assert _get(m, "dprobe_deadletters_total", reason="processing_error") == 0.0  # known, at 0
    assert _get(m, "dprobe_lost_snapshots_total", host="gpu-7") == 4.0
    assert _get(m, "dprobe_conflicting_snapshots_total", host="gpu-2") == 6.0
    assert _get(m, "dprobe_duplicate_snapshots_total") == 3.0
    assert _get(m, "dprobe_late_partials_total") == 2.0
    assert _get(m, "dprobe_late_job_events_total") == 5.0
    assert _get(m, "dprobe_windows_emitted_total") == 11.0
    assert _get(m, "dprobe_process_samples_total") == 320.0
    assert _get(m, "dprobe_forgotten_tenants_total") == 6.0
    h = "dprobe_processing_latency_seconds"
    # delays 0.04, 0.3, 0.5, 7.0, 400.0: le is inclusive (0.5 falls in le="0.5")
    assert _get(m, f"{h}_bucket", le="0.05") == 1.0
    assert _get(m, f"{h}_bucket", le="0.25") == 1.0
    assert _get(m, f"{h}_bucket", le="0.5") == 3.0
    assert _get(m, f"{h}_bucket", le="5.0") == 3.0
    assert _get(m, f"{h}_bucket", le="10.0") == 4.0
    assert _get(m, f"{h}_bucket", le="300.0") == 4.0
    assert _get(m, f"{h}_bucket", le="+Inf") == 5.0
    assert _get(m, f"{h}_count") == 5.0
    assert _get(m, f"{h}_sum") == pytest.approx(407.84)


def test_state_is_read_at_scrape_time_and_a_removed_tenant_disappears() -> None:
    stats = _populated()
    reg = CollectorRegistry()
    WorkerCollector(stats, registry=reg)
    assert reg.get_sample_value("dprobe_tenant_demand_gpus", {"tenant": "vc-b"}) == 8.0
    stats.tenants["vc-a"].demand_gpus = 30.0
    stats.windows_emitted += 1
    del stats.tenants["vc-b"]
    m = _scrape(reg)
    assert _get(m, "dprobe_tenant_demand_gpus", tenant="vc-a") == 30.0
    assert _get(m, "dprobe_windows_emitted_total") == 12.0
    assert not [k for k in m if ("tenant", "vc-b") in k[1]]
    assert [k for k in m if ("tenant", "vc-a") in k[1]]


def test_consumer_lag_uses_kafka_exporter_names() -> None:
    lag = FakeLag(lags={("dprobe.samples", 0): 5, ("dprobe.samples", 1): 7, ("dprobe.jobs", 0): 0})
    reg = CollectorRegistry()
    WorkerCollector(WorkerStats(), registry=reg, lag=lag)
    m = _scrape(reg)
    g = {"consumergroup": "dprobe-worker"}
    assert _get(m, "dprobe_worker_consumer_lag", **g, topic="dprobe.samples", partition="1") == 7.0
    assert _get(m, "dprobe_worker_consumer_lag_sum", **g, topic="dprobe.samples") == 12.0
    assert _get(m, "dprobe_worker_consumer_lag_sum", **g, topic="dprobe.jobs") == 0.0
    lag.lags = {("dprobe.samples", 0): 1}  # the poller replaced its values
    lag.errors = 2
    m = _scrape(reg)
    assert _get(m, "dprobe_worker_consumer_lag_sum", **g, topic="dprobe.samples") == 1.0
    assert _get(m, "dprobe_worker_consumer_lag", **g, topic="dprobe.samples", partition="1") is None
    assert _get(m, "dprobe_consumer_lag_errors_total") == 2.0


def test_a_worker_exports_the_lag_of_the_partitions_it_holds() -> None:
    """Two workers of one group: each shows its own partitions, so a partition's series
    names its worker and a sum over the workers counts each partition once."""
    lags = {("dprobe.samples", 0): 5, ("dprobe.samples", 1): 7, ("dprobe.planning", 0): 2}
    g = {"consumergroup": "dprobe-worker"}
    totals = {}
    for held in ({("dprobe.samples", 0), ("dprobe.planning", 0)}, {("dprobe.samples", 1)}):
        reg = CollectorRegistry()
        WorkerCollector(WorkerStats(assigned=frozenset(held)), registry=reg, lag=FakeLag(lags=lags))
        m = _scrape(reg)
        for (topic, partition), n in lags.items():
            got = _get(m, "dprobe_worker_consumer_lag", **g, topic=topic, partition=str(partition))
            assert got == (float(n) if (topic, partition) in held else None)
        totals[frozenset(held)] = _get(
            m, "dprobe_worker_consumer_lag_sum", **g, topic="dprobe.samples"
        )
    assert sorted(totals.values()) == [5.0, 7.0]
    reg = CollectorRegistry()  # in the middle of a rebalance it holds nothing
    WorkerCollector(WorkerStats(assigned=frozenset()), registry=reg, lag=FakeLag(lags=lags))
    assert _get(_scrape(reg), "dprobe_worker_consumer_lag_sum", **g, topic="dprobe.samples") is None


def test_a_second_collector_with_the_same_names_is_refused() -> None:
    reg = CollectorRegistry()
    WorkerCollector(WorkerStats(), registry=reg)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        WorkerCollector(WorkerStats(), registry=reg)


def test_horizon_labels_are_seconds() -> None:
    assert [horizon_label(h) for h in (600.0, 21600, 0.5)] == ["600", "21600", "0.5"]


def test_served_over_http_on_loopback_with_an_ephemeral_port() -> None:
    reg = CollectorRegistry()
    WorkerCollector(_populated(), registry=reg)
    server = MetricsServer(reg, port=0)
    port = server.start()
    try:
        assert port == server.port > 0
        assert server.url == f"http://127.0.0.1:{port}/metrics"
        body = urllib.request.urlopen(server.url, timeout=5).read().decode()
    finally:
        server.stop()
        server.stop()
    assert 'dprobe_tenant_quota_gpus{tenant="vc-a"} 32.0' in body
    assert "process_cpu_seconds_total" not in body


def test_hosts_without_a_loss_for_a_day_leave_the_lost_snapshots_counter() -> None:
    from dprobe.sinks.worker_stats import LOST_HOST_TTL_S

    s = WorkerStats()
    s.lose("gpu-old", 2, now=0.0)
    s.lose("gpu-kept", 1, now=10.0)
    s.lose("gpu-kept", 1, now=LOST_HOST_TTL_S)  # still losing: stays
    assert s.lost_snapshots == {"gpu-old": 2, "gpu-kept": 2}
    s.lose("gpu-new", 3, now=LOST_HOST_TTL_S + 1.0)
    assert s.lost_snapshots == {"gpu-kept": 2, "gpu-new": 3}  # gpu-old: a day without loss
    s.lose("gpu-old", 1, now=LOST_HOST_TTL_S + 2.0)  # back: a new series from 1
    assert s.lost_snapshots["gpu-old"] == 1


def test_conflicts_count_as_duplicates_too_and_leave_after_a_quiet_day() -> None:
    from dprobe.sinks.worker_stats import LOST_HOST_TTL_S

    s = WorkerStats()
    s.conflict("gpu-a", now=0.0)
    s.conflict("gpu-b", now=5.0)
    s.conflict("gpu-b", now=6.0)
    assert s.conflicting_snapshots == {"gpu-a": 1, "gpu-b": 2} and s.duplicates == 3
    s.conflict("gpu-b", now=LOST_HOST_TTL_S + 1.0)
    assert s.conflicting_snapshots == {"gpu-b": 3}  # gpu-a: a day without a conflict
    assert s.lost_snapshots == {}  # a conflict is no loss


def test_the_worker_s_own_dead_letter_reasons_are_exported_at_0() -> None:
    """The alert on dead letters relies on increase() over a series that exists before
    the first one: every reason the worker itself gives is known in advance."""
    from dprobe.sinks.worker_metrics import DEADLETTER_REASONS
    from dprobe.streams.deadletter import ProcessingError
    from dprobe.streams.state.bounds import StateFull

    assert {ProcessingError.reason, StateFull.reason, "clock_skew"} <= set(DEADLETTER_REASONS)


def test_lost_snapshots_help_says_it_counts_snapshots_not_gaps() -> None:
    """A gap of 4 seqs counts 4 (what DprobeLostSnapshots reports as snapshots lost), so
    the help text must not read as a count of gaps."""
    from prometheus_client import generate_latest

    s, reg = WorkerStats(), CollectorRegistry()
    WorkerCollector(s, registry=reg)
    s.lose("gpu-7", 4, now=0.0)
    text = generate_latest(reg).decode()
    assert 'dprobe_lost_snapshots_total{host="gpu-7"} 4.0' in text
    assert (
        "# HELP dprobe_lost_snapshots_total Snapshots missing from a host's seq "
        "(a gap of n seqs counts n)"
    ) in text
