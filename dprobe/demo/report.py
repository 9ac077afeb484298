"""The end of a demo run: the summary on stdout, the chart, the exit code.

Example:
    >>> report(outcome, plan, Path("dprobe-demo"))  # doctest: +SKIP
    0
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dprobe.demo.chart import chart_horizon, chart_series, render
from dprobe.demo.plan import DemoPlan
from dprobe.demo.run import Outcome
from dprobe.demo.summary import format_summary, summarize

CHART_NAME = "demo.png"


def report(outcome: Outcome, plan: DemoPlan, out_dir: Path,
           say: Callable[[str], None]) -> int:  # fmt: skip
    """Print the summary, write the chart (not after Ctrl-C); 0, or 130 when interrupted
    (the caller says so once all is stopped, as for Ctrl-C at any other point)."""
    summary = summarize(outcome.recording, snapshots=outcome.snapshots)
    for line in format_summary(summary):
        print(line, flush=True)
    if outcome.interrupted:  # nothing more: a worker stopped while starting never served /metrics
        return 130
    if not outcome.metrics_seen:
        say(f"the worker's /metrics never answered at {outcome.metrics_url}")
    horizon = chart_horizon(outcome.recording)
    title = (
        f"dprobe demo: {plan.hosts} hosts x {plan.gpus_per_host} GPUs, {plan.tenants} tenants, "
        f"{plan.window_s / 60:g}-minute windows, {summary.events} scaling events"
    )
    path = render(chart_series(outcome.recording, horizon), out_dir / CHART_NAME,
                  horizon_s=horizon, title=title)  # fmt: skip
    print(f"summary: chart {path}", flush=True)
    return 0
