"""After Ctrl-C the report prints the summary so far, writes no chart and says nothing more:
the demo says it was interrupted once everything has stopped (test_demo_interrupted.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.demo.plan import DemoPlan
from dprobe.demo.record import Recording
from dprobe.demo.report import report
from dprobe.demo.run import Outcome


@pytest.mark.parametrize("metrics_seen", [False, True])
def test_an_interrupted_run_prints_its_summary_writes_no_chart_and_exits_130(
    metrics_seen: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said: list[str] = []
    outcome = Outcome(
        recording=Recording(),
        snapshots=0,
        interrupted=True,  # Ctrl-C while the worker was still starting: no /metrics yet
        metrics_url="http://127.0.0.1:9402/metrics",
        metrics_seen=metrics_seen,
    )
    code = report(outcome, DemoPlan(), tmp_path, say=said.append)
    assert code == 130
    assert capsys.readouterr().out.startswith("summary: windows: 0 TenantWindows")
    assert said == []
    assert not (tmp_path / "demo.png").exists()


def test_a_finished_run_names_a_metrics_endpoint_that_never_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said: list[str] = []
    outcome = Outcome(
        recording=Recording(),
        snapshots=0,
        interrupted=False,
        metrics_url="http://127.0.0.1:9402/metrics",
        metrics_seen=False,
    )
    assert report(outcome, DemoPlan(), tmp_path, say=said.append) == 0
    capsys.readouterr()
    assert said == ["the worker's /metrics never answered at http://127.0.0.1:9402/metrics"]
