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


@pytest.mark.parametrize(
    ("fmt", "text", "expected"),
    [
        (
            "jobs-csv",
            "job_id,user,num_gpu,submit_time,duration\n1,a,1,0,5\n2,"
            + "u" * (200 << 10)
            + ",1,0,5\n",
            "t.csv:3: not valid CSV (field larger than field limit",
        ),
        (
            "demand-csv",
            "ts,tenant,demand_gpus\n9999-12-30T00:00:00,a,1\n",
            "t.csv:2: ts: not epoch seconds or ISO-8601 within",
        ),
    ],
)
def test_a_bad_trace_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, text: str, expected: str
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(text)
    code = main(["evaluate", "--trace", str(trace), "--format", fmt, "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and expected in err


def test_windows_so_short_that_the_trace_makes_millions_are_refused_before_reading_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two tenants whose jobs span 100 minutes (minutes are the default unit):
    # 2 x 6,000 s / 0.01 s = 1.2 million tenant windows, over the bound of a million
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n1,a,1,0,60,vgg16\n2,b,2,40,60,vgg16\n"
    )
    argv = ["evaluate", "--trace", str(trace), "--format", "jobs-csv", "--no-plots"]
    assert main([*argv, "--window-s", "0.01", "--models", "last-value"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()[-1]
    assert err.startswith(
        "dprobe evaluate: --window-s 0.01: the jobs span 100.0 min, 1,200,000 tenant windows"
    )
    suggested = float(err.rsplit("give --window-s ", 1)[1].split()[0])
    assert 12_000 / suggested <= 1_000_000 * (1 + 1e-9) < 12_000 / (suggested * 0.99)
