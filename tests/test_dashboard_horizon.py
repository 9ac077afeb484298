"""The dashboard's queries parse for every horizon label the worker can export."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dprobe.sinks.worker_metrics import horizon_label

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "infra/grafana/dashboards/dprobe.json"


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    return promtool


def _grafana_value(variable: dict[str, Any], label_value: str) -> str | None:
    """What Grafana makes of ``label_value`` in ``variable``: its regex's first capture
    group when it has one, the whole value without a regex, None when it does not match."""
    regex = variable.get("regex", "")
    if not regex:
        return label_value
    m = re.search(regex.strip("/"), label_value)
    if m is None:
        return None
    return m.group(1) if m.groups() else m.group(0)


def test_the_demand_panel_parses_for_a_horizon_of_fractional_seconds(tmp_path: Path) -> None:
    """A plan lead of 90.5 s (move_latency_s 30.5 with 60 s windows) is exported as horizon
    "90.5", which PromQL cannot take as an offset ("90.5s" is no duration): the offset
    uses the horizon's whole seconds, the series selector the label itself."""
    promtool = _promtool()
    label = horizon_label(90.5)
    dash = json.loads(DASHBOARD.read_text())
    values: dict[str, str] = {"tenant": ".*"}
    for variable in dash["templating"]["list"]:
        if "horizon" in variable["query"]["query"].split(",")[-1]:
            value = _grafana_value(variable, label)
            assert value is not None, variable["name"]
            values[variable["name"]] = value
    (panel,) = [p for p in dash["panels"] if p["title"] == "Demand vs forecast vs quota: $tenant"]
    exprs = []
    for target in panel["targets"]:
        expr = target["expr"]
        for name in sorted(values, key=len, reverse=True):
            expr = expr.replace(f"${{{name}}}", values[name]).replace(f"${name}", values[name])
        assert "$" not in expr, expr
        exprs.append(expr)
    assert any('horizon="90.5"' in e and "offset 90s" in e for e in exprs), exprs
    rules = [{"record": f"panel:{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    res = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
