"""Operations files parse and pass their own tools' checks where those tools exist; the
dashboard and the alerts only use metric names and labels that the exporters really
expose, under the scrape job that exports them, with functions that fit each metric's
type; panel units fit the metrics, variables resolve, and Grafana's provisioning finds
the dashboard and its datasource."""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "infra/grafana/dashboards/dprobe.json"
ALERTS = ROOT / "infra/prometheus/alerts.yml"
PROMETHEUS_CONFIG = "infra/prometheus/prometheus.yml"
# Grafana variables, replaced by a value of each so the queries are plain PromQL
GRAFANA_VARS = {
    "${horizon}": "3600", "$horizon": "3600", "${horizon_offset}": "3600", "$tenant": ".*",
    "$__rate_interval": "5m", "$__interval": "5m",
}  # fmt: skip
PROMETHEUS_OWN = {"up"}  # written by Prometheus itself for every target


def test_prometheus_config_and_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    for args in (
        ["check", "config", "infra/prometheus/prometheus.yml"],
        ["check", "rules", "infra/prometheus/alerts.yml"],
    ):
        res = subprocess.run(
            [promtool, *args], cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert res.returncode == 0, res.stdout + res.stderr


def test_docker_compose_file_is_accepted() -> None:
    docker = shutil.which("docker")
    has_plugin = (
        docker is not None
        and subprocess.run(
            [docker, "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    )
    if has_plugin:
        cmd = [docker, "compose", "config", "-q"]
    elif shutil.which("docker-compose"):
        cmd = ["docker-compose", "config", "-q"]
    else:
        pytest.skip("neither 'docker compose' nor 'docker-compose' is installed")
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    text = (ROOT / "docker-compose.yml").read_text()
    for service in ("kafka:", "prometheus:", "grafana:", "worker:", "collector:"):
        assert service in text


def test_alert_rules_pass_their_promtool_unit_tests() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    res = subprocess.run(
        [promtool, "test", "rules", "infra/prometheus/alerts_test.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    tested = set(
        re.findall(r"alertname: (\w+)", (ROOT / "infra/prometheus/alerts_test.yml").read_text())
    )
    assert {"DprobeConsumerLagGrowing", "DprobeLostSnapshots", "DprobeDeadLetters",
            "DprobeForecastErrorHigh", "DprobeWorkerHung",
            "DprobeCollectorNotSampling"} <= tested  # fmt: skip


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def _alert_exprs() -> dict[str, str]:
    """``alert name -> expr`` of alerts.yml (inline or ``|`` block exprs; no YAML library)."""
    exprs: dict[str, str] = {}
    lines = ALERTS.read_text().splitlines()
    alert = ""
    for i, line in enumerate(lines):
        if m := re.match(r"\s*- alert: (\S+)", line):
            alert = m.group(1)
        elif m := re.match(r"(\s*)expr: (.*)", line):
            indent, value = len(m.group(1)), m.group(2).strip()
            if value in {"|", ">", "|-", ">-"}:
                block = []
                for nxt in lines[i + 1 :]:
                    if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                        break
                    block.append(nxt.strip())
                value = " ".join(block)
            exprs[alert] = value
    return exprs


def _plain(expr: str) -> str:
    for var, value in sorted(GRAFANA_VARS.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(var, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords and labels removed).

    >>> sorted(metric_names('sum by (le) (rate(a_bucket{job="x"}[5m])) / on (t) b > 0'))
    ['a_bucket', 'b']
    """
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    keywords = {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "by"}
    return {
        m.group(0)
        for m in re.finditer(r"(?<![\w.:])[a-zA-Z_:][\w:]*(?![\w:])(?!\s*\()", text)
        if m.group(0) not in keywords
    }


def test_metric_name_extraction() -> None:
    assert metric_names(
        'max by (tenant) (dprobe_tenant_forecast_gpus{quantile="0.9"} offset 3600s) '
        "/ on (tenant) group_left clamp_min(x_total, 1) and y unless z > bool 2"
    ) == {"dprobe_tenant_forecast_gpus", "x_total", "y", "z"}


def test_dashboard_loads_with_the_panels_operators_need() -> None:
    dash = _dashboard()
    titles = {p["title"]: p for p in dash["panels"]}
    needed = {
        "Demand vs forecast vs quota: $tenant",
        "Effective demand",
        "Level mix",
        "Consumer lag",
        "Scaling events",
        "Dead letters and lost snapshots",
        "Processing latency p99",
    }
    assert needed <= set(titles)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert "dprobe_tenant_demand_gpus" in variables["tenant"]["query"]["query"]
    assert titles["Demand vs forecast vs quota: $tenant"]["repeat"] == "tenant"
    demand = " ".join(t["expr"] for t in titles["Demand vs forecast vs quota: $tenant"]["targets"])
    for part in ('quantile="0.5"', 'quantile="0.9"', "dprobe_tenant_quota_gpus", "$tenant"):
        assert part in demand
    assert "histogram_quantile(0.99" in titles["Processing latency p99"]["targets"][0]["expr"]
    # level_instances counts samples (window_s / interval_s per instance): shares only
    mix = titles["Level mix"]
    assert "/ ignoring (level) group_left" in mix["targets"][0]["expr"]
    assert mix["fieldConfig"]["defaults"]["unit"] == "percentunit"
    assert "kafka_consumergroup_lag" in titles["Consumer lag"]["targets"][0]["expr"]
    events = titles["Scaling events"]["targets"][0]["expr"]
    assert "dprobe_scaling_events_total" in events and "by (action)" in events
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "prometheus", p["title"]
            assert all(t["datasource"]["uid"] == "prometheus" for t in p["targets"])
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_a_repeated_panel_names_its_copy_in_its_title() -> None:
    """Grafana draws one copy of a repeated panel per value of its variable, every copy
    under the panel's title: without the variable in it, no copy says which it is."""
    dash = _dashboard()
    defined = {v["name"] for v in dash["templating"]["list"]}
    repeated = [p for p in dash["panels"] if p.get("repeat")]
    assert repeated
    for p in repeated:
        var = p["repeat"]
        assert var in defined, p["title"]
        assert re.search(rf"\$(\{{{var}\b|{var}\b)", p["title"]), p["title"]


@dataclass
class _Lag:
    group: str = "dprobe-worker"
    lags: dict[tuple[str, int], int] = field(default_factory=lambda: {("dprobe.samples", 0): 3})
    committed: dict[tuple[str, int], int] = field(
        default_factory=lambda: {("dprobe.samples", 0): 7}
    )
    ends: dict[tuple[str, int], int] = field(default_factory=lambda: {("dprobe.samples", 0): 10})
    members: int | None = 0
    updated_at: float | None = 1.7e9
    errors: int = 0


def _exposed_names() -> set[str]:
    """Sample names of a real scrape of the worker's, the collector's and the lag
    exporter's metrics."""
    return set(_exposed_labels())


def _exposed_labels() -> dict[str, set[str]]:
    """``sample name -> its label names`` of a real scrape of the worker's, the
    collector's and the lag exporter's metrics."""
    labels: dict[str, set[str]] = {}
    for families in _scrapes().values():
        for fam in families:
            for sample in fam.samples:
                labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


@functools.cache
def _scrapes() -> dict[str, list[Any]]:
    """``scrape job -> metric families`` of a real scrape of each exporter, under the job
    name prometheus.yml gives it."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    from dprobe.collectors.metrics import CollectorMetrics
    from dprobe.schema import Gpu, HostSnapshot, Proc
    from dprobe.sinks.lag_exporter import LagCollector
    from dprobe.sinks.metrics_server import Heartbeat, MetricsServer
    from dprobe.sinks.worker_metrics import WorkerCollector, export_loop_silence
    from dprobe.sinks.worker_stats import TenantView, WorkerStats

    stats = WorkerStats()
    stats.lost_snapshots["gpu-1"] += 1
    stats.conflict("gpu-2", now=0.0)
    stats.dead_letter("malformed_json")
    stats.scaling_events["scale_up"] += 1
    stats.observe_delay(0.2)
    stats.tenants["vc-a"] = TenantView(
        demand_gpus=4, level_counts={"L2": 1}, forecast={3600.0: (3, 5)}, quota_gpus=8,
        abs_error={3600.0: 1},
    )  # fmt: skip
    worker, lag, collector = CollectorRegistry(), CollectorRegistry(), CollectorRegistry()
    WorkerCollector(stats, registry=worker, lag=_Lag())
    export_loop_silence(Heartbeat(), worker)
    LagCollector([_Lag()], registry=lag)  # type: ignore[list-item]
    metrics = CollectorMetrics(collector)
    metrics.backend_errors.labels(backend="nvml", kind="timeout").inc()
    metrics.sample_faults.labels(kind="nan").inc()
    metrics.send_errors.labels(kind="connect").inc()
    metrics.dropped.labels(reason="spool_full").inc()
    # the per-GPU and per-tenant gauges exist once a snapshot was taken
    gpu = Gpu(uuid="GPU-1", index=0, util=80, mem_util=40, mem_used=10, mem_total=80, power_w=3)
    proc = Proc(pid=7, gpu="GPU-1", tenant="vc-a", job="j", sm_util=60, mem_util=30, mem_used=10)
    snapshot = HostSnapshot(host="n1", ts=1.0, interval_s=1.0, seq=0, gpus=(gpu,), procs=(proc,))
    metrics.fleet.observe(snapshot, names={"GPU-1": "NVIDIA H200"})
    scrapes = {}
    for job, registry in (
        ("dprobe-worker", worker), ("dprobe-collector", collector), ("dprobe-lag", lag)
    ):  # fmt: skip
        with MetricsServer(registry, port=0) as server:
            text = urllib.request.urlopen(server.url, timeout=5).read().decode()
        scrapes[job] = list(text_string_to_metric_families(text))
    return scrapes


def _scrape_jobs() -> set[str]:
    """The job names of prometheus.yml."""
    return set(re.findall(r"job_name:\s*(\S+)", (ROOT / PROMETHEUS_CONFIG).read_text()))


def test_every_alert_expression_is_read() -> None:
    exprs = _alert_exprs()
    assert len(exprs) == 15
    assert "dprobe_collector_snapshots_total" in exprs["DprobeCollectorNotSampling"]
    assert exprs["DprobeWorkerDown"] == 'up{job="dprobe-worker"} == 0'
    assert "dprobe_worker_event_loop_silent_seconds" in exprs["DprobeWorkerHung"]
    assert exprs["DprobeLagExporterDown"] == 'up{job="dprobe-lag"} == 0'
    assert "dprobe_lag_last_refresh_timestamp_seconds" in exprs["DprobeLagStale"]
    assert "deriv(kafka_consumergroup_lag_sum" in exprs["DprobeConsumerLagGrowing"]
    assert ") > 0.5 and max by" in exprs["DprobeForecastErrorHigh"]
    assert exprs["DprobeForecastErrorHigh"].endswith("[1h])) >= 1")
    assert 'kind=~"gpu_lost|reset_required|' in exprs["DprobeCollectorGpuLost"]
    assert "dprobe_conflicting_snapshots_total" in exprs["DprobeHostIdConflict"]


def test_dashboard_and_alerts_use_only_exposed_metric_names() -> None:
    exposed = _exposed_names() | PROMETHEUS_OWN
    assert "kafka_consumergroup_lag_sum" in exposed
    assert "dprobe_processing_latency_seconds_bucket" in exposed
    used = {("dashboard", n) for e in _dashboard_exprs() for n in metric_names(_plain(e))}
    used |= {(f"alert {a}", n) for a, e in _alert_exprs().items() for n in metric_names(e)}
    assert sorted((where, n) for where, n in used if n not in exposed) == []
    used_names = {n for _, n in used}
    assert {"dprobe_tenant_forecast_gpus", "kafka_consumergroup_lag_sum", "up"} <= used_names


TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every series it scrapes


def _selector_labels(expr: str) -> list[tuple[str, set[str]]]:
    """``(metric, label names matched)`` of each ``metric{...}`` selector of ``expr``.

    >>> found = _selector_labels('max by (t) (a{job="x",q=~"0.5|0.9"}) and b{h!="1"} offset 5m')
    >>> [(name, sorted(labels)) for name, labels in found]
    [('a', ['job', 'q']), ('b', ['h'])]
    """
    text = re.sub(r'"[^"]*"', '""', expr)
    return [
        (m[1], set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", m[2])))
        for m in re.finditer(r"([a-zA-Z_:][\w:]*)\{([^}]*)\}", text)
    ]


def test_dashboard_and_alerts_use_only_exposed_labels() -> None:
    """Each label a query matches, groups or joins on is one the metrics it reads carry
    (or one Prometheus adds): a misspelt label matches nothing and nothing says so."""
    exposed = _exposed_labels() | {name: set() for name in PROMETHEUS_OWN}
    dash = _dashboard()
    variables = [v["query"]["query"] for v in dash["templating"]["list"]]
    queries = [("dashboard", _plain(e)) for e in _dashboard_exprs()]
    queries += [(f"alert {a}", e) for a, e in _alert_exprs().items()]
    wrong = []
    for where, expr in queries:
        carried = TARGET_LABELS.union(*(exposed.get(n, set()) for n in metric_names(expr)))
        for name, labels in _selector_labels(expr):
            wrong += [(where, name, label) for label in labels - exposed[name] - TARGET_LABELS]
        for group in re.findall(r"\b(?:by|on|ignoring|without)\s*\(([^)]*)\)", expr):
            used = {label.strip() for label in group.split(",") if label.strip()}
            wrong += [(where, "by/on", label) for label in used - carried]
    for query in variables:
        m = re.fullmatch(r"label_values\(([\w:]+)\{[^}]*\},\s*(\w+)\)", query)
        assert m, query
        if m[2] not in exposed[m[1]]:
            wrong.append(("dashboard variable", m[1], m[2]))
    assert wrong == []


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": _plain(expr)}
        for i, expr in enumerate(_dashboard_exprs())
    ]
    path = tmp_path / "dashboard_queries.yml"
    # JSON is YAML: promtool reads it as a rule file
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    res = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_lost_and_conflict_panels_show_a_hosts_first_snapshots(tmp_path: Path) -> None:
    """A host's lost and conflict counters are born at their first count (3, not 0), which
    increase() alone never sees: the panel shows that first loss, once (a series born
    within the interval and counting on shows its count, not that plus its increase), but
    not the old counts of a worker Prometheus only starts to scrape (promtool evaluates
    the panel's queries)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    titles = {p["title"]: p for p in _dashboard()["panels"]}
    targets = {t["refId"]: t["expr"] for t in titles["Dead letters and lost snapshots"]["targets"]}
    w = 'job="dprobe-worker"'
    tests = []
    for ref, metric in (("B", "dprobe_lost_snapshots_total"),
                        ("C", "dprobe_conflicting_snapshots_total")):  # fmt: skip
        assert metric in targets[ref]
        series = [
            (f'up{{{w},instance="w1:9402"}}', "1x30"),
            (f'{metric}{{{w},instance="w1:9402",host="gpu-9"}}', "_x14 3x15"),
            # a worker first scraped at 14m: its counts are older than that
            (f'up{{{w},instance="w2:9402"}}', "_x14 1x15"),
            (f'{metric}{{{w},instance="w2:9402",host="gpu-10"}}', "_x14 5x15"),
            # born at 12m and counting on: all five count, the first one once
            (f'{metric}{{{w},instance="w1:9402",host="gpu-11"}}', "_x12 1 2 3 4 5 5x13"),
        ]
        tests.append({
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "promql_expr_test": [{
                "expr": f"panel:{ref}",
                "eval_time": "16m",
                "exp_samples": [
                    {"labels": f'panel:{ref}{{host="gpu-10"}}', "value": 0},
                    {"labels": f'panel:{ref}{{host="gpu-11"}}', "value": 5},
                    {"labels": f'panel:{ref}{{host="gpu-9"}}', "value": 3},
                ],
            }],
        })  # fmt: skip
    rules = [{"record": f"panel:{ref}", "expr": _plain(targets[ref])} for ref in ("B", "C")]
    (tmp_path / "rules.yml").write_text(json.dumps({"groups": [{"name": "p", "rules": rules}]}))
    (tmp_path / "test.yml").write_text(
        json.dumps({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests})
    )
    res = subprocess.run(
        [promtool, "test", "rules", "test.yml"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


# Grafana's own variables, set by Grafana in every query
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__range_s", "__range_ms"}
TIME_UNITS = {"s", "ms", "µs", "ns", "dtdurations", "dtdurationms"}
BYTE_UNITS = {"bytes", "decbytes", "bits", "decbits"}


def _queries() -> list[tuple[str, str]]:
    """``(where, PromQL)`` of every dashboard query (variables replaced) and alert."""
    queries = [
        (f"panel {p['title']!r}", _plain(t["expr"]))
        for p in _dashboard()["panels"]
        for t in p.get("targets", [])
    ]
    return queries + [(f"alert {a}", e) for a, e in _alert_exprs().items()]


def _selector_matchers(expr: str) -> list[tuple[str, dict[str, str]]]:
    """``(metric, {label: value})`` of each ``metric{...}`` selector of ``expr``.

    >>> _selector_matchers('rate(a_total{job="w", k=~"x|y"}[5m]) / b{job="l"}')
    [('a_total', {'job': 'w', 'k': 'x|y'}), ('b', {'job': 'l'})]
    """
    return [
        (m[1], dict(re.findall(r'(\w+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"', m[2])))
        for m in re.finditer(r"([a-zA-Z_:][\w:]*)\{([^}]*)\}", expr)
    ]


def _sample_types() -> dict[str, dict[str, str]]:
    """``scrape job -> {sample name -> counter, gauge or bucket}``: what rate() may read
    (a counter, a histogram's _count and _sum) and what histogram_quantile() may read."""
    types: dict[str, dict[str, str]] = {}
    for job, families in _scrapes().items():
        kinds = types.setdefault(job, {"up": "gauge"})
        for fam in families:
            for sample in fam.samples:
                if fam.type == "histogram" and sample.name.endswith("_bucket"):
                    kinds[sample.name] = "bucket"
                elif fam.type in {"counter", "histogram", "summary"}:
                    kinds[sample.name] = "counter"
                else:
                    kinds[sample.name] = "gauge"
    return types


def test_each_query_reads_its_metrics_from_the_job_that_exports_them() -> None:
    """Every selector names a job of prometheus.yml, and that job's exporter has the
    metric: a collector metric under job="dprobe-worker" matches nothing."""
    jobs = _scrape_jobs()
    assert jobs == set(_scrapes()), "prometheus.yml and the exporters tested differ"
    types = _sample_types()
    wrong = []
    for where, expr in _queries():
        selected = {name for name, _ in _selector_matchers(expr)}
        wrong += [(where, name, "no job") for name in metric_names(expr) - selected]
        for name, matchers in _selector_matchers(expr):
            job = matchers.get("job")
            if job not in jobs:
                wrong.append((where, name, f"job {job!r} is not scraped"))
            elif name not in types[job]:
                wrong.append((where, name, f"not exported by {job}"))
    assert wrong == []


def _call_args(expr: str, function: str) -> list[str]:
    """The argument text of each call of ``function`` in ``expr``.

    >>> _call_args("histogram_quantile(0.9, sum by (le) (rate(a[5m]))) + 1", "histogram_quantile")
    ['0.9, sum by (le) (rate(a[5m]))']
    """
    found = []
    for m in re.finditer(rf"\b{function}\s*\(", expr):
        depth, start = 1, m.end()
        for i in range(start, len(expr)):
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            if depth == 0:
                found.append(expr[start:i])
                break
    return found


def test_functions_fit_the_type_of_the_metric_they_read() -> None:
    """rate() and increase() read counters (a gauge's dips read as resets), deriv() and
    delta() gauges, histogram_quantile() a histogram's buckets aggregated by le."""
    types = _sample_types()
    wrong = []
    for where, expr in _queries():
        kind = {name: types[m.get("job", "")].get(name) for name, m in _selector_matchers(expr)
                if m.get("job") in types}  # fmt: skip
        for function, wanted in (
            ("rate", {"counter", "bucket"}), ("irate", {"counter", "bucket"}),
            ("increase", {"counter", "bucket"}), ("resets", {"counter", "bucket"}),
            ("deriv", {"gauge"}), ("delta", {"gauge"}), ("idelta", {"gauge"}),
            ("predict_linear", {"gauge"}),
        ):  # fmt: skip
            for args in _call_args(expr, function):
                wrong += [(where, function, n) for n in metric_names(args)
                          if kind.get(n) not in wanted]  # fmt: skip
        for args in _call_args(expr, "histogram_quantile"):
            wrong += [(where, "histogram_quantile", n) for n in metric_names(args)
                      if kind.get(n) != "bucket"]  # fmt: skip
            for group in re.findall(r"\bby\s*\(([^)]*)\)", args):
                if "le" not in {label.strip() for label in group.split(",")}:
                    wrong.append((where, "histogram_quantile", f"by ({group}) drops le"))
            if re.search(r"\bwithout\s*\([^)]*\ble\b", args):
                wrong.append((where, "histogram_quantile", "without (le)"))
    assert wrong == []


def _dimension(name: str) -> str:
    """What one sample of ``name`` measures, by Prometheus' naming rules.

    >>> [_dimension(n) for n in ("a_seconds_bucket", "a_seconds_count", "b_bytes", "c_gpus")]
    ['seconds', 'count', 'bytes', 'other']
    >>> [_dimension(n) for n in ("d_utilization_percent", "e_power_watts", "f_timestamp_seconds")]
    ['percent', 'watts', 'timestamp']
    """
    if name.endswith(("_count", "_total")):
        return "count"
    base = re.sub(r"_(bucket|sum|total)$", "", name)
    if base.endswith("_timestamp_seconds"):
        return "timestamp"
    suffix = base.rsplit("_", 1)[-1]
    return suffix if suffix in {"seconds", "bytes", "percent", "watts"} else "other"


def test_panel_units_fit_the_metrics_they_plot() -> None:
    """A panel of durations is in seconds (what the metrics hold), one of bytes in
    bytes, of percentages in percent (0-100), of power in watts, and no other panel
    claims one of those units."""
    wrong = []
    for p in _dashboard()["panels"]:
        if p["type"] == "row":
            continue
        unit = p["fieldConfig"]["defaults"].get("unit", "none")
        names = {n for t in p["targets"] for n in metric_names(_plain(t["expr"]))}
        dims = {_dimension(n) for n in names} - {"count"} or {"count"}
        if any("histogram_quantile" in t["expr"] for t in p["targets"]):
            dims -= {"other"}
        if dims == {"seconds"}:
            ok = unit == "s"
        elif dims == {"bytes"}:
            ok = unit in {"bytes", "decbytes"}
        elif dims == {"percent"}:
            ok = unit == "percent"  # 0-100 ("percentunit" is 0-1)
        elif dims == {"watts"}:
            ok = unit == "watt"
        else:
            ok = unit not in TIME_UNITS | BYTE_UNITS | {"percent", "watt"}
        if not ok:
            wrong.append((p["title"], unit, sorted(names)))
    assert wrong == []


def test_dashboard_variables_and_legend_labels_resolve() -> None:
    """Every $variable a panel uses is defined (or Grafana's own), and a legend's
    {{label}} is one the query keeps (else the legend shows nothing there)."""
    dash = _dashboard()
    defined = {v["name"] for v in dash["templating"]["list"]} | GRAFANA_BUILTINS
    wrong = []
    for p in dash["panels"]:
        texts = [p["title"], p.get("description", "")]
        texts += [t[k] for t in p.get("targets", []) for k in ("expr", "legendFormat") if k in t]
        used = {
            m[0] or m[1] for text in texts for m in re.findall(r"\$\{(\w+)[^}]*\}|\$(\w+)", text)
        }
        wrong += [(p["title"], f"${name} is not defined") for name in used - defined]
        for t in p.get("targets", []):
            kept = re.match(r"\s*\w+\s+by\s*\(([^)]*)\)", t["expr"])
            if kept is None:
                continue
            labels = {label.strip() for label in kept[1].split(",")}
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")):
                if label not in labels:
                    wrong.append((p["title"], f"legend {{{{{label}}}}} is not kept by the query"))
    assert wrong == []


def test_grafana_provisioning_loads_the_dashboard_with_its_datasource() -> None:
    """docker compose mounts the dashboards where the provider reads them, and the
    provisioned datasource has the uid the panels name and the compose Prometheus' URL."""
    compose = (ROOT / "docker-compose.yml").read_text()
    mounts = dict(
        re.findall(r"-\s*\./(infra/grafana/[\w/]+?)/?:([\w/]+?)/?(?::ro)?\s*$", compose, re.M)
    )
    provider = (ROOT / "infra/grafana/provisioning/dashboards/dprobe.yml").read_text()
    path = re.search(r"path:\s*(\S+)", provider)
    assert path and mounts.get("infra/grafana/dashboards") == path[1].rstrip("/"), mounts
    assert mounts.get("infra/grafana/provisioning") == "/etc/grafana/provisioning", mounts
    sources = (ROOT / "infra/grafana/provisioning/datasources/prometheus.yml").read_text()
    uids = set(re.findall(r"uid:\s*(\S+)", sources))
    dash = _dashboard()
    used = {p["datasource"]["uid"] for p in dash["panels"] if "datasource" in p}
    used |= {v["datasource"]["uid"] for v in dash["templating"]["list"]}
    assert used <= uids, (used, uids)
    url = re.search(r"url:\s*http://([\w.-]+):(\d+)", sources)
    assert url, sources
    assert re.search(rf"^  {url[1]}:\s*$", compose, re.M), f"no compose service {url[1]}"
    # Prometheus listens on 9090 unless its command says otherwise
    assert url[2] == "9090" and "--web.listen-address" not in compose, url[0]


@pytest.mark.parametrize(
    "name",
    [
        "dprobe-collector.service",
        "dprobe-lag.service",
        "dprobe-worker.service",
        "dprobe-archive.service",
    ],
)
def test_a_systemd_unit_verifies_and_is_hardened(name: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = ROOT / "infra" / "systemd" / name
    # verify the unit as written, with a command that exists here in place of dprobe's
    copy = tmp_path / name
    copy.write_text(unit.read_text().replace("/usr/local/bin/dprobe ", "/bin/true "))
    verify = subprocess.run(
        [analyze, "verify", "--man=no", str(copy)], capture_output=True, text=True, check=False
    )
    assert verify.returncode == 0, verify.stderr
    security = subprocess.run(
        [analyze, "security", "--offline=true", str(unit)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", security.stdout)
    assert found, security.stdout[-500:] + security.stderr
    assert float(found[1]) < 5.0, security.stdout[-300:]
