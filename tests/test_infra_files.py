"""Operations files parse and pass their own tools' checks where those tools exist; the
dashboard and the alerts only use metric names that the exporters really expose."""

from __future__ import annotations

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
# Grafana variables, replaced by a value of each so the queries are plain PromQL
GRAFANA_VARS = {"${horizon}": "3600", "$horizon": "3600", "$tenant": ".*", "$__rate_interval": "5m"}
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
            "DprobeForecastErrorHigh"} <= tested  # fmt: skip


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
        "Level instances",
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
    assert "kafka_consumergroup_lag" in titles["Consumer lag"]["targets"][0]["expr"]
    events = titles["Scaling events"]["targets"][0]["expr"]
    assert "increase(dprobe_scaling_events_total" in events and "by (action)" in events
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
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    from dprobe.collectors.metrics import CollectorMetrics
    from dprobe.sinks.lag_exporter import LagCollector
    from dprobe.sinks.metrics_server import MetricsServer
    from dprobe.sinks.worker_metrics import WorkerCollector
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
    registry = CollectorRegistry()
    WorkerCollector(stats, registry=registry, lag=_Lag())
    LagCollector([_Lag()], registry=registry)  # type: ignore[list-item]
    collector = CollectorMetrics(registry)
    collector.backend_errors.labels(backend="nvml", kind="timeout").inc()
    collector.sample_faults.labels(kind="nan").inc()
    collector.send_errors.labels(kind="connect").inc()
    collector.dropped.labels(reason="spool_full").inc()
    with MetricsServer(registry, port=0) as server:
        text = urllib.request.urlopen(server.url, timeout=5).read().decode()
    labels: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def test_every_alert_expression_is_read() -> None:
    exprs = _alert_exprs()
    assert len(exprs) == 13
    assert exprs["DprobeWorkerDown"] == 'up{job="dprobe-worker"} == 0'
    assert exprs["DprobeLagExporterDown"] == 'up{job="dprobe-lag"} == 0'
    assert "dprobe_lag_last_refresh_timestamp_seconds" in exprs["DprobeLagStale"]
    assert "deriv(kafka_consumergroup_lag_sum" in exprs["DprobeConsumerLagGrowing"]
    assert exprs["DprobeForecastErrorHigh"].endswith("> 0.5")
    assert 'kind="gpu_lost"' in exprs["DprobeCollectorGpuLost"]
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
