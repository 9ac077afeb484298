"""`dprobe evaluate`: JSON contract on stdout, plots, split, exit 2 on bad input."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dprobe.cli import main


def _demand_csv(path: Path, n: int = 300, start: int = 0) -> Path:
    """``n`` 10-minute rows of two tenants, from row number ``start`` of the series."""
    lines = ["ts,tenant,demand_gpus,quota_gpus"]
    for i in range(start, start + n):
        t = 1_590_000_000 + 600 * i
        lines.append(f"{t},vc-a,{8 + 8 * ((i // 12) % 2)},32")
        lines.append(f"{t},vc-b,{round(4 + 2 * math.sin(i / 10), 2)},16")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_json_rows_on_stdout_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _demand_csv(tmp_path / "d.csv")
    out = tmp_path / "report"
    code = main(
        [
            "evaluate",
            "--trace",
            str(trace),
            "--format",
            "demand-csv",
            "--json",
            "--models",
            "last-value,moving-average,holt-winters",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)  # exactly one JSON document, nothing else
    assert {tuple(sorted(r)) for r in rows} == {
        (
            "calibrated",
            "horizon_s",
            "mae",
            "mase",
            "model",
            "p90_coverage",
            "p90_coverage_uncalibrated",
            "pinball_p90",
            "pinball_p90_uncalibrated",
            "rmse",
            "under_rate",
        )
    }
    assert all(r["calibrated"] and 0 <= r["p90_coverage_uncalibrated"] <= 1 for r in rows)
    assert {(r["model"], r["horizon_s"]) for r in rows} == {
        (m, h)
        for m in ("last-value", "moving-average", "holt-winters")
        for h in (600.0, 3600.0, 21600.0)
    }
    assert all(r["mase"] == 1.0 for r in rows if r["model"] == "last-value")
    assert "split: fit/warm-up" in captured.err and "test " in captured.err
    assert (out / "error_by_horizon.png").stat().st_size > 1000
    assert len(list(out.glob("forecast_*.png"))) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["split"].startswith("split:")


def test_folder_of_files_and_human_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    _demand_csv(folder / "one.csv", n=200)
    code = main(
        [
            "evaluate",
            "--trace",
            str(folder),
            "--format",
            "demand-csv",
            "--models",
            "last-value",
            "--no-plots",
            "--horizons",
            "600,3600",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "split:" in text and "last-value" in text and "MASE" in text


def test_bad_line_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("ts,tenant,demand_gpus\n0,a,1\n600,a,lots\n")
    code = main(["evaluate", "--trace", str(bad), "--format", "demand-csv", "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert f"{bad}:3: demand_gpus: not a number" in captured.err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--test-start", "1999-01-01"], "outside the trace"),
        (
            ["--test-start", "2020-05-22", "--test-end", "2020-05-10"],
            "--test-end 2020-05-10 is not after --test-start 2020-05-22",
        ),
        (  # within one minute: the values as given, not rounded to the same minute
            ["--test-start", "100.9", "--test-end", "100.2"],
            "--test-end 100.2 is not after --test-start 100.9",
        ),
        (["--models", "prophet"], "unknown prophet"),
        (["--horizons", "abc"], "--horizons"),
    ],
)
def test_bad_options_exit_2(tmp_path: Path, capsys, extra: list[str], message: str) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=50)
    code = main(["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots", *extra])
    assert code == 2
    assert message in capsys.readouterr().err


def test_short_horizons_are_dropped_with_a_note(tmp_path: Path, capsys) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=200)
    args = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--json"]
    code = main([*args, "--no-plots", "--models", "last-value", "--window-s", "1800"])
    captured = capsys.readouterr()
    assert code == 0
    assert {r["horizon_s"] for r in json.loads(captured.out)} == {3600.0, 21600.0}
    assert "not evaluated: 600 s" in captured.err
    code = main([*args, "--no-plots", "--window-s", "1800", "--horizons", "600"])
    assert code == 2


def test_checkpoint_saved_by_one_run_warm_starts_the_next(tmp_path: Path, capsys) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=150)
    ckpt = tmp_path / "mmoe.pt"
    base = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots", "--json"]
    assert main([*base, "--models", "dprobe-mmoe", "--save-checkpoint", str(ckpt)]) == 0
    assert ckpt.stat().st_size > 10_000
    # said where it went, on stderr (stdout holds the JSON alone)
    assert f"checkpoint written to {ckpt}\n" in capsys.readouterr().err
    later = _demand_csv(tmp_path / "later.csv", n=150, start=150)  # the span after it
    base[2] = str(later)
    assert main([*base, "--models", "dprobe-mmoe", "--warm-start", str(ckpt)]) == 0
    assert json.loads(capsys.readouterr().out)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    junk = ["--models", "dprobe-mmoe", "--warm-start", str(tmp_path / "junk.pt")]
    assert main([*base, *junk]) == 2
    assert "--warm-start" in capsys.readouterr().err


def test_a_checkpoint_of_the_other_multitask_model_exits_2(tmp_path: Path, capsys) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=60)
    ckpt = tmp_path / "mmoe.pt"
    base = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots", "--json"]
    assert main([*base, "--models", "dprobe-mmoe", "--save-checkpoint", str(ckpt)]) == 0
    capsys.readouterr()
    assert main([*base, "--models", "dprobe-mmoe-jobs", "--warm-start", str(ckpt)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "not a checkpoint of this model" in captured.err


@pytest.mark.parametrize("models", ["last-value,holt-winters", "dprobe-mmoe,dprobe-mmoe-jobs"])
@pytest.mark.parametrize("flag", ["--warm-start", "--save-checkpoint"])
def test_checkpoint_flags_need_exactly_one_multitask_model(
    tmp_path: Path, capsys, models: str, flag: str
) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=50)
    args = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots"]
    assert main([*args, "--models", models, flag, str(tmp_path / "x.pt")]) == 2
    assert f"{flag} needs exactly one multi-task model" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_the_job_multitask_model_saves_and_warm_starts_too(tmp_path: Path, capsys) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=60)
    ckpt = tmp_path / "jobs.pt"
    base = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots", "--json"]
    base += ["--models", "dprobe-mmoe-jobs"]
    assert main([*base, "--save-checkpoint", str(ckpt)]) == 0
    assert ckpt.stat().st_size > 10_000
    capsys.readouterr()
    # the span after it, from the checkpoint: evaluated, the job model scored
    later = _demand_csv(tmp_path / "later.csv", n=60, start=60)
    warm = [*base[:2], str(later), *base[3:], "--warm-start", str(ckpt)]
    assert main(warm) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["model"] for r in rows} == {"last-value", "dprobe-mmoe-jobs"}
    # the same span again: the model evaluated holds the checkpoint's windows, so it is
    # refused (a model left fresh would be evaluated without a word)
    assert main([*base, "--warm-start", str(ckpt)]) == 2
    assert f"--warm-start {ckpt}: the checkpoint has learned windows up to" in (
        capsys.readouterr().err
    )
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    assert main([*base, "--warm-start", str(tmp_path / "junk.pt")]) == 2  # read, not ignored
    assert "--warm-start" in capsys.readouterr().err


def test_json_holds_no_infinity(tmp_path: Path, capsys) -> None:
    # demand that never moves within the test span: last value makes no error, MASE = inf
    trace = tmp_path / "flat.csv"
    rows = [f"{1_590_000_000 + 600 * i},vc-a,{8 if i < 60 else 16}" for i in range(100)]
    trace.write_text("ts,tenant,demand_gpus\n" + "\n".join(rows) + "\n")
    args = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots", "--json"]
    assert (
        main([*args, "--models", "holt-winters", "--test-start", str(1_590_000_000 + 600 * 70)])
        == 0
    )
    out = capsys.readouterr().out
    rows_out = json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    hw = [r for r in rows_out if r["model"] == "holt-winters"]
    assert hw and all(r["mase"] is None for r in hw)  # infinite: no finite ratio to show


def test_no_calibration_scores_the_models_own_p90(tmp_path: Path, capsys) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=200)
    args = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--json", "--no-plots"]
    assert main([*args, "--models", "last-value"]) == 0
    calibrated = {r["horizon_s"]: r for r in json.loads(capsys.readouterr().out)}
    assert main([*args, "--models", "last-value", "--no-calibration"]) == 0
    captured = capsys.readouterr()
    for r in json.loads(captured.out):
        assert not r["calibrated"] and r["p90_coverage_uncalibrated"] is None
        before = calibrated[r["horizon_s"]]
        assert r["p90_coverage"] == before["p90_coverage_uncalibrated"]
        assert r["pinball_p90"] == before["pinball_p90_uncalibrated"]
    assert "p90 cover" in captured.err


def test_test_end_leaves_out_a_window_it_cuts_short(tmp_path: Path, capsys) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=150)
    end = 1_590_000_000 + 600 * 120 + 300  # half-way through a window
    args = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots"]
    assert main([*args, "--models", "last-value", "--test-end", str(end)]) == 0
    split = capsys.readouterr().out.splitlines()[0]
    last_full = 1_590_000_000 + 600 * 120  # the last window that ends at or before it
    assert (
        split.split(" test ")[1]
        .split(" (")[0]
        .endswith(datetime.fromtimestamp(last_full, UTC).strftime("%Y-%m-%d %H:%M"))
    )


def test_a_malformed_profile_table_found_on_its_own_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    table = tmp_path / "data" / "lucid-profiles" / "single_data.csv"
    table.parent.mkdir(parents=True)
    table.write_text("foo,bar\n1,2\n")
    monkeypatch.setenv("DPROBE_TRACE_DIR", str(tmp_path / "data"))
    trace = _demand_csv(tmp_path / "d.csv", n=60)
    out = tmp_path / "report"
    args = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--json"]
    assert main([*args, "--models", "last-value", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)  # the evaluation's rows are out
    warning = captured.err.index(f"warning: no profiler level accuracy in this report: {table}")
    assert warning < captured.err.index("evaluated ")  # said before the evaluation ran
    assert json.loads((out / "summary.json").read_text())["profiler_lofo"] is None


def test_a_checkpoint_that_has_seen_the_traces_span_exits_2(tmp_path: Path, capsys) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=60)
    ckpt = tmp_path / "mmoe.pt"
    base = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots", "--json"]
    base += ["--models", "last-value,dprobe-mmoe"]
    assert main([*base, "--save-checkpoint", str(ckpt)]) == 0
    capsys.readouterr()
    # the same trace again: every window is at or before what the checkpoint learned
    assert main([*base, "--warm-start", str(ckpt)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"--warm-start {ckpt}: the checkpoint has learned windows up to" in captured.err
    assert "for 2 tenants it holds (vc-a, vc-b)" in captured.err


@pytest.mark.parametrize("fmt", ["demand-csv", "helios-vc"])
def test_time_unit_applies_only_to_a_jobs_trace(tmp_path: Path, capsys, fmt: str) -> None:
    trace = _demand_csv(tmp_path / "d.csv", n=50)
    args = ["evaluate", "--trace", str(trace), "--format", fmt, "--no-plots", "--json"]
    assert main([*args, "--models", "last-value", "--time-unit", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--time-unit applies only with --format jobs-csv" in captured.err


def test_one_tenant_is_said_in_the_singular(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "one.csv"
    rows = [f"{1_590_000_000 + 600 * i},vc-a,{8 + i % 3}" for i in range(40)]
    trace.write_text("ts,tenant,demand_gpus\n" + "\n".join(rows) + "\n")
    args = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--no-plots", "--json"]
    assert main([*args, "--models", "last-value", "--horizons", "600"]) == 0
    err = capsys.readouterr().err
    assert "; 1 tenant, 600-s windows" in err and "1 tenants" not in err


def test_plots_of_an_earlier_run_that_this_run_does_not_draw_are_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--out` holds this run's plots only: an earlier run's forecast plots (another
    trace's tenants) would read as this trace's. Other files there are left alone."""
    out = tmp_path / "report"
    out.mkdir()
    stale = out / "forecast_vc-old_3600s.png"
    stale.write_bytes(b"an earlier run's plot")
    mine = out / "notes.txt"
    mine.write_text("kept")
    trace = _demand_csv(tmp_path / "d.csv")
    argv = ["evaluate", "--trace", str(trace), "--format", "demand-csv", "--out", str(out)]
    assert main([*argv, "--models", "last-value"]) == 0
    capsys.readouterr()
    drawn = sorted(p.name for p in out.glob("forecast_*.png"))
    assert drawn and all(n.startswith(("forecast_vc-a_", "forecast_vc-b_")) for n in drawn)
    assert not stale.exists()
    assert mine.read_text() == "kept"
