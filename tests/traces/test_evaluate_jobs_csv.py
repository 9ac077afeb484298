"""`dprobe evaluate --format jobs-csv`: per-tenant windows of a jobs trace are scored like
any demand trace, and the profiler's leave-one-family-out level accuracy is reported
beside the forecasts (one stderr line, ``profiler_lofo`` in summary.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dprobe.cli import main


def test_jobs_csv_windows_with_the_profiler_accuracy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["job_id,user,num_gpu,submit_time,duration,model_name"]
    for i in range(400):
        lines.append(f"{i},vc_{'ab'[i % 2]},{1 + i % 4},{i * 7},{30 + (i * 13) % 90},vgg16")
    trace = tmp_path / "jobs.csv"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "report"
    code = main(
        [
            "evaluate",
            "--trace",
            str(trace),
            "--format",
            "jobs-csv",
            "--json",
            "--models",
            "last-value,moving-average",
            "--out",
            str(out),
            "--horizons",
            "600,3600",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert {r["model"] for r in rows} == {"last-value", "moving-average"}
    assert "profiler level accuracy, leave one family out" in captured.err
    summary = json.loads((out / "summary.json").read_text())
    lofo = summary["profiler_lofo"]
    assert 0.0 <= lofo["accuracy"] <= 1.0 and lofo["n"] > 0
