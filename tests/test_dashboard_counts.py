"""The dashboard's bar panels count each interval's events once (promtool evaluates their
queries on a counter whose events are known)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "infra/grafana/dashboards/dprobe.json"
WORKER = 'job="dprobe-worker",instance="w1:9402"'
STEP_M = 5  # Grafana's $__interval (the step between bars), in minutes
SCRAPE_M = 1
# Grafana's $__rate_interval: max(4 scrape intervals, one step plus one scrape interval)
RATE_INTERVAL_M = max(4 * SCRAPE_M, STEP_M + SCRAPE_M)
# minute -> events; the worker restarts at minute 15, so its counter starts again at 0
EVENTS = {3: 2, 5: 1, 9: 2, 16: 1, 18: 1, 23: 3}
RESTART_M, END_M = 15, 30


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    return promtool


def _panels() -> dict[str, dict[str, Any]]:
    dash = json.loads(DASHBOARD.read_text())
    return {p["title"]: p for p in dash["panels"]}


def _counter_values() -> str:
    """The counter a worker exports for ``EVENTS``, one value a minute in promtool's
    notation: absent until its first event, 0 again from the restart."""
    values, count = [], None
    for minute in range(END_M + 1):
        if minute == RESTART_M:
            count = 0
        if minute in EVENTS:
            count = (count or 0) + EVENTS[minute]
        values.append("_" if count is None else str(count))
    return " ".join(values)


def _events_between(start_m: int, end_m: int) -> int:
    """Events in the interval ``(start_m, end_m]``, from ``EVENTS`` itself."""
    return sum(n for minute, n in EVENTS.items() if start_m < minute <= end_m)


COUNTING = [
    ("Scaling events", "A", "dprobe_scaling_events_total", "action"),
    ("Dead letters and lost snapshots", "A", "dprobe_deadletters_total", "reason"),
    ("Dead letters and lost snapshots", "B", "dprobe_lost_snapshots_total", "host"),
    ("Dead letters and lost snapshots", "C", "dprobe_conflicting_snapshots_total", "host"),
]


@pytest.mark.parametrize(("title", "ref", "metric", "label"), COUNTING)
def test_a_bar_counts_the_events_of_its_interval_once(
    title: str, ref: str, metric: str, label: str, tmp_path: Path
) -> None:
    """Each bar is the number of events since the bar before: whole numbers that add up
    to every event once (overlapping increase() windows counted some twice, and
    extrapolation drew fractions of an event), also across a worker restart."""
    promtool = _promtool()
    (expr,) = [t["expr"] for t in _panels()[title]["targets"] if t["refId"] == ref]
    assert metric in expr
    expr = expr.replace("$__rate_interval", f"{RATE_INTERVAL_M}m")
    expr = expr.replace("$__interval", f"{STEP_M}m")
    evals = [
        {
            "expr": expr,
            "eval_time": f"{t}m",
            "exp_samples": [
                {"labels": f'{{{label}="x"}}', "value": _events_between(t - STEP_M, t)}
            ],
        }
        for t in range(STEP_M, END_M + 1, STEP_M)
    ]
    assert sum(e["exp_samples"][0]["value"] for e in evals) == sum(EVENTS.values())
    test = {
        "rule_files": [],
        "evaluation_interval": f"{SCRAPE_M}m",
        "tests": [{
            "interval": f"{SCRAPE_M}m",
            "input_series": [
                {"series": f"up{{{WORKER}}}", "values": f"1x{END_M}"},
                {"series": f'{metric}{{{WORKER},{label}="x"}}', "values": _counter_values()},
            ],
            "promql_expr_test": evals,
        }],
    }  # fmt: skip
    (tmp_path / "test.yml").write_text(json.dumps(test))
    res = subprocess.run(
        [promtool, "test", "rules", "test.yml"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
