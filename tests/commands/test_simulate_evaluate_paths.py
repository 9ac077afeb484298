"""``dprobe simulate`` and ``dprobe evaluate`` refuse bad values and output paths up front:
exit 2, one line on stderr naming the flag, nothing run and no file written."""

from __future__ import annotations

import json
import math
import pathlib
from pathlib import Path
from typing import Any

import pytest

from dprobe.cli import main


def _files(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def _demand_csv(path: Path, n: int = 60) -> Path:
    lines = ["ts,tenant,demand_gpus"]
    for i in range(n):
        t = 1_590_000_000 + 600 * i
        lines.append(f"{t},vc-a,{8 + 8 * ((i // 12) % 2)}")
        lines.append(f"{t},vc-b,{round(4 + 2 * math.sin(i / 10), 2)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _jobs(tmp_path: Path) -> list[str]:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n"
        + "".join(f"{i},a,8,0,20,vgg16\n" for i in range(3))
    )
    (tmp_path / "vcs.csv").write_text("vc,node num\na,1\nb,2\n")
    return ["simulate", "--jobs", str(jobs), "--vcs", str(tmp_path / "vcs.csv")]


def _refused(argv: list[str], root: Path, capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Run ``argv``: exit 2, nothing on stdout, one line on stderr holding every needle,
    no file made or removed under ``root``."""
    before = _files(root)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    line = lines[0]
    assert line.startswith(f"dprobe {argv[0]}: ")
    for needle in needles:
        assert needle in line
    assert _files(root) == before
    return line


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the default --out and --chart land here, if anywhere
    return tmp_path


# evaluate: output paths


def _evaluate(trace: Path, *extra: str) -> list[str]:
    return ["evaluate", "--trace", str(trace), "--format", "demand-csv", *extra]


def test_evaluate_checkpoint_under_a_file_is_refused_before_the_run(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")
    ckpt = f"{trace}/x.pt"  # the parent is a file
    argv = _evaluate(trace, "--no-plots", "--models", "dprobe-mmoe", "--save-checkpoint", ckpt)
    line = _refused(argv, cwd, capsys, "--save-checkpoint", ckpt, "not a directory")
    assert "Traceback" not in line


def test_evaluate_checkpoint_that_is_a_directory_is_refused_leaving_no_tmp(
    cwd: Path, capsys
) -> None:
    trace = _demand_csv(cwd / "d.csv")
    folder = cwd / "ckpts"
    folder.mkdir()
    argv = _evaluate(trace, "--no-plots", "--models", "dprobe-mmoe")
    _refused(
        [*argv, "--save-checkpoint", str(folder)], cwd, capsys, "--save-checkpoint", "directory"
    )
    assert not (cwd / "ckpts.tmp").exists()


def test_evaluate_checkpoint_write_failure_leaves_no_temporary_file(
    cwd: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _demand_csv(cwd / "d.csv", n=40)
    ckpt = cwd / "m.pt"

    def refuse(self: Path, target: Any) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "replace", refuse)
    argv = _evaluate(trace, "--no-plots", "--json", "--models", "dprobe-mmoe")
    assert main([*argv, "--save-checkpoint", str(ckpt)]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == f"dprobe evaluate: --save-checkpoint {ckpt}: No space left on device"
    assert not ckpt.exists()
    assert not (cwd / "m.pt.tmp").exists()


def test_evaluate_out_that_is_a_file_is_refused_before_the_run(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")
    taken = cwd / "report"
    taken.write_text("not a folder\n")
    argv = _evaluate(trace, "--models", "last-value", "--out", str(taken))
    _refused(argv, cwd, capsys, "--out", str(taken), "not a directory")
    assert taken.read_text() == "not a folder\n"


def test_evaluate_out_under_a_file_is_refused(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")
    out = f"{trace}/report"
    argv = _evaluate(trace, "--models", "last-value", "--out", out)
    _refused(argv, cwd, capsys, "--out", out, f"{trace} is not a directory")


def test_evaluate_out_holding_a_directory_where_a_plot_goes_is_refused(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")
    (cwd / "report" / "summary.json").mkdir(parents=True)
    argv = _evaluate(trace, "--models", "last-value", "--out", str(cwd / "report"))
    _refused(argv, cwd, capsys, "--out", "summary.json", "is a directory")


def test_evaluate_writes_plots_to_a_new_nested_out(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")
    out = cwd / "a" / "b"
    assert main(_evaluate(trace, "--models", "last-value", "--out", str(out))) == 0
    assert (out / "summary.json").is_file() and (out / "error_by_horizon.png").is_file()
    capsys.readouterr()


# evaluate: values and messages


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-600"])
@pytest.mark.parametrize("flag", ["--window-s", "--time-unit"])
def test_evaluate_float_flags_must_be_finite_and_positive(
    cwd: Path, capsys, flag: str, value: str
) -> None:
    trace = _demand_csv(cwd / "d.csv")
    argv = _evaluate(trace, "--no-plots", "--models", "last-value", f"{flag}={value}")
    line = _refused(argv, cwd, capsys)
    assert line == (f"dprobe evaluate: {flag} must be a finite number > 0, got {float(value):g}")


def test_evaluate_header_only_trace_says_it_has_no_rows(cwd: Path, capsys) -> None:
    trace = cwd / "empty.csv"
    trace.write_text("ts,tenant,demand_gpus\n")
    line = _refused(_evaluate(trace, "--no-plots", "--models", "last-value"), cwd, capsys)
    assert line == f"dprobe evaluate: {trace}: the trace has no rows"


def test_evaluate_names_test_end_only_when_given(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")
    argv = _evaluate(trace, "--no-plots", "--models", "last-value", "--test-end", "2000-01-01")
    _refused(argv, cwd, capsys, "--test-end 2000-01-01", "no 600-s window")


def test_evaluate_one_window_trace_says_so_without_naming_test_start(cwd: Path, capsys) -> None:
    trace = cwd / "one.csv"
    trace.write_text("ts,tenant,demand_gpus\n1590000000,a,1\n")
    line = _refused(_evaluate(trace, "--no-plots", "--models", "last-value"), cwd, capsys)
    assert "holds one 600-s window" in line and "at least 5 consecutive windows" in line
    assert "--test-start" not in line and "outside" not in line


def test_evaluate_five_windows_are_enough_as_the_one_window_message_says(cwd: Path, capsys) -> None:
    trace = cwd / "five.csv"
    rows = [f"{1_590_000_000 + 600 * i},a,{i}" for i in range(5)]
    trace.write_text("ts,tenant,demand_gpus\n" + "\n".join(rows) + "\n")
    assert main(_evaluate(trace, "--no-plots", "--models", "last-value")) == 0
    capsys.readouterr()


def _json_rows(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert main([*argv, "--json"]) == 0
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return rows


def test_evaluate_a_model_named_twice_is_scored_once(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")
    once = _json_rows(_evaluate(trace, "--no-plots", "--models", "moving-average"), capsys)
    argv = _evaluate(trace, "--no-plots", "--models", "moving-average,last-value,moving-average")
    twice = _json_rows(argv, capsys)
    assert [(r["model"], r["horizon_s"]) for r in once] == [
        ("last-value", 600.0),
        ("moving-average", 600.0),
        ("last-value", 3600.0),
        ("moving-average", 3600.0),
    ]
    assert twice == once


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_evaluate_models_without_a_name_is_refused(cwd: Path, capsys, value: str) -> None:
    trace = _demand_csv(cwd / "d.csv")
    line = _refused(_evaluate(trace, "--no-plots", f"--models={value}"), cwd, capsys)
    assert line == "dprobe evaluate: --models: need one or more model names"


# simulate: --chart


def test_simulate_chart_that_is_a_directory_is_refused(cwd: Path, capsys) -> None:
    folder = cwd / "charts"
    folder.mkdir()
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "--chart", str(folder)]
    _refused(argv, cwd, capsys, "--chart", str(folder), "is a directory")
    assert not (cwd / "charts.png").exists()


def test_simulate_chart_under_a_file_is_refused_before_the_run(cwd: Path, capsys) -> None:
    argv = _jobs(cwd)
    chart = f"{argv[2]}/chart.png"  # under jobs.csv
    _refused(
        [*argv, "--policies", "fifo", "--modes", "static", "--chart", chart],
        cwd,
        capsys,
        f"--chart {chart}: ",
        "not a directory",
    )


def test_simulate_chart_of_a_format_matplotlib_cannot_write_is_refused(cwd: Path, capsys) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "--chart", "c.txt"]
    _refused(argv, cwd, capsys, "--chart c.txt", ".txt", ".png")


def test_simulate_chart_without_extension_reports_the_png_it_writes(cwd: Path, capsys) -> None:
    chart = cwd / "out" / "chart"
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "--chart", str(chart)]
    assert main(argv) == 0
    assert f"chart written to {chart}.png" in capsys.readouterr().err
    assert (cwd / "out" / "chart.png").is_file() and not chart.exists()


def test_simulate_chart_to_a_device_writes_there_not_beside_it(cwd: Path, capsys) -> None:
    sink = cwd / "sink"  # /dev/null, by a name without an extension
    sink.symlink_to("/dev/null")
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "--chart", str(sink)]
    assert main(argv) == 0
    assert f"chart written to {sink}\n" in capsys.readouterr().err
    assert not (cwd / "sink.png").exists()


# simulate: bounds


@pytest.mark.parametrize("workers", ["0", "-1", "257", "100000"])
def test_simulate_workers_out_of_bounds_are_refused(cwd: Path, capsys, workers: str) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "reactive"]
    line = _refused([*argv, "--workers", workers], cwd, capsys)
    assert line == f"dprobe simulate: --workers must be within 1 .. 256, got {workers}"


def test_simulate_starts_no_more_workers_than_runs(
    cwd: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dprobe.sim.grid as grid

    seen: list[int] = []
    real = grid.run_seeds

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["workers"])
        return real(*args, **{**kwargs, "workers": 1})

    monkeypatch.setattr(grid, "run_seeds", spy)
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "reactive", "--chart", ""]
    assert main([*argv, "--workers", "256"]) == 0
    assert seen == [2]  # fifo x (static, reactive)
    assert main([*argv, "--sweep", "--latencies", "0,300", "--workers", "256"]) == 0
    assert seen[-1] == 5  # static once, reactive at 2 latencies x 2 reclaim rules
    capsys.readouterr()


def test_simulate_help_documents_the_bounds(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "1 to 256" in text and "at most 100 and 100,000 nodes" in text


@pytest.mark.parametrize("scale", ["1e6", "101", "0", "-1", "nan", "inf"])
def test_simulate_node_scale_out_of_range_is_refused(cwd: Path, capsys, scale: str) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "--node-scale", scale]
    _refused(argv, cwd, capsys, "--node-scale must be > 0 and at most 100")


def test_simulate_too_many_nodes_after_scaling_is_refused(cwd: Path, capsys) -> None:
    argv = _jobs(cwd)
    argv = [argv[0], argv[1], argv[2], "--nodes", "99999", "--node-scale", "50"]
    _refused(
        [*argv, "--policies", "fifo", "--modes", "static"],
        cwd,
        capsys,
        "--node-scale 50",
        "100,000",
    )


def test_simulate_nodes_above_the_bound_are_refused(cwd: Path, capsys) -> None:
    argv = _jobs(cwd)[:3]
    _refused(
        [*argv, "--nodes", "1000000000"],
        cwd,
        capsys,
        "--nodes must be at most 100,000, got 1000000000",
    )


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--interval", "nan", "--interval must be a finite number > 0, got nan"),
        ("--horizon", "inf", "--horizon must be a finite number > 0, got inf"),
        ("--time-unit", "nan", "--time-unit must be a finite number > 0, got nan"),
        ("--move-latency", "inf", "--move-latency must be a finite number >= 0, got inf"),
        (
            "--checkpoint-interval",
            "nan",
            "--checkpoint-interval must be a finite number >= 0, got nan",
        ),
        ("--lend-horizon", "inf", "--lend-horizon must be a finite number >= 0, got inf"),
    ],
)
def test_simulate_float_flags_must_be_finite(
    cwd: Path, capsys, flag: str, value: str, message: str
) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", flag, value]
    assert _refused(argv, cwd, capsys) == f"dprobe simulate: {message}"


def test_evaluate_test_span_shorter_than_every_horizon_is_one_line(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")  # 60 windows of 600 s: the last 30 % is 17.7 windows
    argv = _evaluate(trace, "--no-plots", "--models", "last-value", "--horizons", "86400")
    line = _refused(argv, cwd, capsys, "shorter than the shortest horizon (86400 s)")
    assert "(10620 s)" in line  # 0.3 x 59 windows x 600 s
    # one horizon the span can score is enough
    argv = _evaluate(trace, "--no-plots", "--models", "last-value", "--horizons", "600,86400")
    assert main(argv) == 0
    capsys.readouterr()


def test_evaluate_names_a_horizon_it_could_not_score(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")  # a test span of 10,620 s
    argv = _evaluate(trace, "--no-plots", "--models", "last-value", "--json")
    assert main([*argv, "--horizons", "600,3600,21600,86400"]) == 0
    captured = capsys.readouterr()
    assert sorted({r["horizon_s"] for r in json.loads(captured.out)}) == [600.0, 3600.0]
    note = "horizons with no forecast to score (the test span is 10620 s): 21600, 86400 s"
    assert note in captured.err.splitlines()
    # every horizon scored: no such line
    assert main([*argv, "--horizons", "600,3600"]) == 0
    assert "no forecast to score" not in capsys.readouterr().err


def test_evaluate_counts_a_horizon_as_the_windows_it_scores_against(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")  # the last 600-s window ends at 1,590,036,000
    span = ["--test-start", "1590034800"]  # a 1,200-s test span: two windows
    # 1,300 s is scored two windows ahead (round(1300 / 600) = 2): it fits the span
    argv = _evaluate(trace, "--no-plots", "--models", "last-value", *span, "--horizons", "1300")
    assert main(argv) == 0
    capsys.readouterr()
    # 1,600 s is three windows ahead: it does not
    argv = _evaluate(trace, "--no-plots", "--models", "last-value", *span, "--horizons", "1600")
    _refused(argv, cwd, capsys, "(1200 s) is shorter than the shortest horizon (1600 s)")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--seeds", "-1,2"], "--seeds must be within 0 .. 4294967295, got -1"),
        (["--seeds", "3,4294967296"], "--seeds must be within 0 .. 4294967295, got 4294967296"),
        (["--seed", "-3"], "--seed must be within 0 .. 4294967295, got -3"),
    ],
)
def test_simulate_seeds_the_generators_refuse_are_named_before_the_run(
    cwd: Path, capsys, flags: list[str], message: str
) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "reactive", *flags]
    assert _refused(argv, cwd, capsys) == f"dprobe simulate: {message}"


def test_evaluate_a_negative_seed_is_named_before_the_run(cwd: Path, capsys) -> None:
    argv = _evaluate(_demand_csv(cwd / "d.csv"), "--no-plots", "--seed", "-1")
    line = _refused(argv, cwd, capsys)
    assert line == "dprobe evaluate: --seed must be within 0 .. 4294967295, got -1"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--modes", "reactive,oracle", "--no-gate"],
         "--no-gate applies only with --modes predictive"),
        (["--modes", "static,reactive", "--lend-horizon", "600"],
         "--lend-horizon applies only with --modes predictive or oracle"),
        (["--modes", "static,reactive", "--horizon", "1200"],
         "--horizon applies only with --modes predictive or oracle"),
    ],
)  # fmt: skip
def test_simulate_flags_of_modes_not_run_are_refused(
    cwd: Path, capsys, flags: list[str], message: str
) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", *flags]
    assert _refused(argv, cwd, capsys) == f"dprobe simulate: {message}"


# simulate: --forecaster


@pytest.mark.parametrize("modes", [("reactive",), ("static", "oracle")])
def test_simulate_forecaster_without_predictive_is_warned_of(
    cwd: Path, capsys, modes: tuple[str, ...]
) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", *modes, "--chart", ""]
    assert main([*argv, "--forecaster", "last-value"]) == 0
    err = capsys.readouterr().err
    assert "warning: --forecaster last-value is not used: only --modes predictive" in err
    assert main(argv) == 0  # not given: no warning
    assert "--forecaster" not in capsys.readouterr().err


def test_simulate_forecaster_with_predictive_is_not_warned_of(cwd: Path, capsys) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "predictive", "--chart", ""]
    assert main([*argv, "--forecaster", "last-value"]) == 0
    captured = capsys.readouterr()
    assert "is not used" not in captured.err
    assert "predictive forecaster: last-value" in captured.out + captured.err


def test_evaluate_a_negative_plot_tenants_is_refused_before_the_run(cwd: Path, capsys) -> None:
    argv = _evaluate(_demand_csv(cwd / "d.csv"), "--plot-tenants", "-1")
    line = _refused(argv, cwd, capsys)
    assert line == "dprobe evaluate: --plot-tenants must be >= 0, got -1"


def test_evaluate_a_missing_warm_start_checkpoint_is_named_in_one_line(cwd: Path, capsys) -> None:
    missing = cwd / "nowhere.pt"
    argv = _evaluate(
        _demand_csv(cwd / "d.csv"), "--no-plots", "--models", "dprobe-mmoe",
        "--warm-start", str(missing),
    )  # fmt: skip
    line = _refused(argv, cwd, capsys)
    assert line == f"dprobe evaluate: --warm-start {missing}: no such file"


@pytest.mark.parametrize(
    ("flag", "value", "choices"),
    [
        ("--policies", "", "fifo, sjf, srtf, qssf, las"),
        ("--policies", ",", "fifo, sjf, srtf, qssf, las"),
        ("--modes", " , ", "static, reactive, predictive, oracle"),
    ],
)
def test_simulate_policies_or_modes_without_a_name_are_refused(
    cwd: Path, capsys, flag: str, value: str, choices: str
) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "--chart", "c.png"]
    line = _refused([*argv, flag, value], cwd, capsys)
    assert line == f"dprobe simulate: {flag}: need one or more of {choices}"


# --time-unit and a header in seconds


def _seconds_jobs(tmp_path: Path) -> Path:
    jobs = tmp_path / "sec.csv"
    rows = "".join(f"{i},a,1,{600 * i},300,vgg16\n" for i in range(12))
    jobs.write_text("job_id,user,num_gpu,submit_time_s,duration_s,model_name\n" + rows)
    return jobs


@pytest.mark.parametrize("unit", ["60", "1"])
def test_time_unit_with_a_header_in_seconds_is_refused(cwd: Path, capsys, unit: str) -> None:
    jobs = _seconds_jobs(cwd)
    (cwd / "vcs.csv").write_text("vc,node num\na,1\n")
    message = (
        f"{jobs}:1: --time-unit does not apply: the header names submit_time_s and duration_s, "
        "which are read in seconds"
    )
    simulate = ["simulate", "--jobs", str(jobs), "--vcs", str(cwd / "vcs.csv")]
    simulate += ["--policies", "fifo", "--modes", "static", "--chart", "c.png"]
    line = _refused([*simulate, "--time-unit", unit], cwd, capsys)
    assert line == f"dprobe simulate: {message}"
    evaluate = ["evaluate", "--trace", str(jobs), "--format", "jobs-csv"]
    evaluate += ["--no-plots", "--models", "last-value", "--horizons", "600"]
    line = _refused([*evaluate, "--time-unit", unit], cwd, capsys)
    assert line == f"dprobe evaluate: {message}"
    # without the flag the file is read, in seconds
    assert main(simulate) == 0
    assert main(evaluate) == 0
    capsys.readouterr()


def test_simulate_colocate_with_helios_is_refused(cwd: Path, capsys) -> None:
    # the synthetic stream's jobs have no model name: no job could ever share a GPU
    helios = cwd / "helios"
    helios.mkdir()
    head = "time,running_gpu_num,pending_gpu_num,total_gpu_num,"
    head += "running_gpu_num_noless_8,pending_gpu_num_noless_8\n"
    rows = "".join(
        f"2020-05-01 {h:02d}:{m:02d}:00,2,0,8,0,0\n" for h in range(24) for m in range(60)
    )
    (helios / "vcA.csv").write_text(head + rows)
    colocate = cwd / "colocate.csv"
    colocate.write_text("model1,speed1,model2,speed2\nvgg16,0.9,vgg16,0.9\n")
    argv = ["simulate", "--helios", str(helios), "--days", "1", "--policies", "fifo"]
    argv += ["--modes", "static", "--chart", "c.png"]
    line = _refused([*argv, "--colocate", str(colocate)], cwd, capsys)
    assert line == (
        "dprobe simulate: --colocate does not apply with --helios: its synthetic jobs have no "
        "model name, so none would share a GPU"
    )
    assert main([*argv, "--chart", ""]) == 0  # the same run without it
    capsys.readouterr()


@pytest.mark.parametrize("out", [""])
def test_evaluate_an_empty_out_is_refused_not_the_current_folder(
    cwd: Path, capsys, out: str
) -> None:
    trace = _demand_csv(cwd / "d.csv")
    line = _refused(_evaluate(trace, "--models", "last-value", "--out", out), cwd, capsys)
    assert line == (
        "dprobe evaluate: --out '' names no folder: give one, or --no-plots to write nothing"
    )
    assert not (cwd / "summary.json").exists()


# empty paths (an unset shell variable): refused, not read as the current folder or dropped


def _refused_by_parser(argv: list[str], root: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """As :func:`_refused`, for a value the argument parser refuses (it exits 2)."""
    before = _files(root)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert _files(root) == before
    return lines[0]


@pytest.mark.parametrize("flag", ["--trace", "--warm-start", "--save-checkpoint"])
def test_evaluate_an_empty_path_is_refused(cwd: Path, capsys, flag: str) -> None:
    trace = _demand_csv(cwd / "d.csv")
    argv = _evaluate(trace, "--no-plots", "--models", "dprobe-mmoe", flag, "")
    line = _refused_by_parser(argv, cwd, capsys)
    assert line == f"dprobe evaluate: argument {flag}: an empty path (see: dprobe evaluate --help)"


@pytest.mark.parametrize("flag", ["--jobs", "--helios", "--vcs", "--colocate"])
def test_simulate_an_empty_path_is_refused(cwd: Path, capsys, flag: str) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "--chart", "c.png"]
    if flag in ("--jobs", "--helios"):  # in place of the jobs file
        argv = [argv[0], *argv[3:]]
    line = _refused_by_parser([*argv, flag, ""], cwd, capsys)
    assert line == f"dprobe simulate: argument {flag}: an empty path (see: dprobe simulate --help)"


@pytest.mark.parametrize("gpus", ["0", "32"])  # no GPU; more than the 3 nodes' 24 GPUs
def test_simulate_a_trace_whose_every_job_is_left_out_is_refused(
    cwd: Path, capsys, gpus: str
) -> None:
    argv = _jobs(cwd)
    jobs = Path(argv[2])
    jobs.write_text(
        "job_id,user,num_gpu,submit_time,duration\n" + f"1,a,{gpus},0,20\n2,b,{gpus},5,20\n"
    )
    line = _refused(
        [*argv, "--policies", "fifo", "--modes", "static", "--chart", "c.png"], cwd, capsys
    )
    assert line == (
        f"dprobe simulate: {jobs}: no job to simulate: every job asks for 0 GPUs or more than "
        "the cluster's 24 GPUs"
    )
    jobs.write_text(jobs.read_text() + "3,b,8,9,20\n")  # one job that fits: it runs
    assert main([*argv, "--policies", "fifo", "--modes", "static", "--chart", ""]) == 0
    assert "2 jobs left out" in capsys.readouterr().err


def test_evaluate_test_start_at_the_first_window_says_why_it_is_refused(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")  # the first 600-s window ends at 1,590,000,600
    argv = _evaluate(trace, "--no-plots", "--models", "last-value", "--test-start", "1590000600")
    line = _refused(argv, cwd, capsys)
    assert line == (
        "dprobe evaluate: --test-start 2020-05-20 18:50 is the end of the trace's first window: "
        "give a later one, so that the models have at least one window to fit on"
    )
    # one window later there is one to fit on
    argv = _evaluate(trace, "--no-plots", "--models", "last-value", "--test-start", "1590001200")
    assert main(argv) == 0
    capsys.readouterr()


# simulate: --share-models


def _sharing(cwd: Path) -> list[str]:
    """One node of 8 GPUs and ten 1-GPU jobs at once: two wait unless they share a GPU."""
    jobs = cwd / "share.csv"
    rows = "".join(f"{i},a,1,0,100,m2\n" for i in range(9)) + "9,a,1,0,100,vgg16\n"
    jobs.write_text("job_id,user,num_gpu,submit_time,duration,model_name\n" + rows)
    (cwd / "vcs.csv").write_text("vc,node num\na,1\n")
    (cwd / "colocate.csv").write_text("model1,speed1,model2,speed2\nm2,0.5,m2,0.5\n")
    argv = ["simulate", "--jobs", str(jobs), "--vcs", str(cwd / "vcs.csv")]
    argv += ["--colocate", str(cwd / "colocate.csv"), "--policies", "fifo", "--modes", "static"]
    return [*argv, "--chart", ""]


@pytest.mark.parametrize("names", ["vgg16, m2", " vgg16 ,m2,", "m2,vgg16,m2"])
def test_simulate_share_models_are_read_as_policies_are(cwd: Path, capsys, names: str) -> None:
    # a space after a comma (or a name twice) names the same models
    rows = _json_rows([*_sharing(cwd), "--share-models", names], capsys)
    assert [r["avg_queue_s"] for r in rows] == [0.0]  # both waiting jobs share a GPU
    alone = _json_rows([*_sharing(cwd), "--share-models", "m2"], capsys)
    assert [r["avg_queue_s"] for r in alone] == [600.0]  # vgg16 waits 100 minutes


@pytest.mark.parametrize("names", ["VGG16", "m2,resnet"])
def test_simulate_share_models_no_job_has_are_refused(cwd: Path, capsys, names: str) -> None:
    argv = [*_sharing(cwd), "--share-models", names]
    line = _refused(argv, cwd, capsys, "--share-models: no job of the trace has model")
    assert line.endswith("(names are matched exactly; its models: m2, vgg16)")


# evaluate: plots


@pytest.mark.parametrize(
    ("horizon_s", "said"), [(600.0, "10 min"), (3600.0, "1 h"), (5400.0, "90 min")]
)
def test_evaluate_forecast_plot_titles_say_the_horizon_as_the_error_plot_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, horizon_s: float, said: str
) -> None:
    import matplotlib.pyplot as plt

    from dprobe.commands.evaluate_plots import forecasts_vs_actual
    from dprobe.models.forecast.evaluation import EvalResult

    titles: list[str] = []
    close = plt.close

    def seen(fig: Any) -> None:
        titles.append(fig.axes[0].get_title())
        close(fig)

    monkeypatch.setattr(plt, "close", seen)
    pts = [(1_590_000_000.0 + 600 * i, 2.0, 3.0, 2.5) for i in range(3)]
    result = EvalResult(rows=[], series={("last-value", "vc-a", horizon_s): pts})
    paths = forecasts_vs_actual(
        result, tmp_path, tenants=["vc-a"], horizon_s=horizon_s, models=["last-value"]
    )
    assert [p.name for p in paths] == [f"forecast_vc-a_{int(horizon_s)}s.png"]
    assert titles == [f"vc-a: forecast {said} ahead vs actual (test span)"]


def test_evaluate_plots_forecasts_at_a_horizon_it_scored(cwd: Path, capsys) -> None:
    trace = _demand_csv(cwd / "d.csv")  # the last window ends at 2020-05-21 04:40
    span = ["--test-start", "2020-05-21T03:20", "--horizons", "600,6000"]  # 4,800 s
    argv = _evaluate(trace, "--models", "last-value", "--out", str(cwd / "r"), *span)
    assert main(argv) == 0
    err = capsys.readouterr().err
    # 6,000 s is nearer 1 h than 600 s is, but nothing could be scored that far ahead
    assert "(the test span is 4800 s): 6000 s" in err
    assert sorted(p.name for p in (cwd / "r").glob("forecast_*")) == [
        "forecast_vc-a_600s.png",
        "forecast_vc-b_600s.png",
    ]


def test_evaluate_draws_no_empty_forecast_plot(tmp_path: Path) -> None:
    from dprobe.commands.evaluate_plots import forecasts_vs_actual
    from dprobe.models.forecast.evaluation import EvalResult

    pts = [(1_590_000_000.0 + 600 * i, 2.0, 3.0, 2.5) for i in range(3)]
    result = EvalResult(rows=[], series={("last-value", "vc-a", 600.0): pts})
    paths = forecasts_vs_actual(
        result, tmp_path, tenants=["vc-a", "vc-b"], horizon_s=600.0, models=["last-value"]
    )
    assert [p.name for p in paths] == ["forecast_vc-a_600s.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forecast_vc-a_600s.png"]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--interval", "600"], "--interval does"),
        (["--horizon", "1200", "--guarantee", "0.2"], "--horizon and --guarantee do"),
        (["--move-latency", "0", "--guarantee", "0.5"], "--move-latency and --guarantee do"),
    ],
)
def test_simulate_quota_settings_with_static_quotas_alone_are_refused(
    cwd: Path, capsys, flags: list[str], named: str
) -> None:
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static", "--chart", "c.png"]
    line = _refused([*argv, *flags], cwd, capsys)
    assert line == (
        f"dprobe simulate: {named} not apply with --modes static (static quotas never move a node)"
    )
    # with a mode that moves quotas they apply, and say so
    argv = [*_jobs(cwd), "--policies", "fifo", "--modes", "static,reactive", "--chart", ""]
    assert main([*argv, "--interval", "600", "--guarantee", "0.25"]) == 0
    assert "planning every 600 s, guarantee 0.25 of each quota" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        (["--out", "plots"], "--out does"),
        (["--plot-tenants", "5"], "--plot-tenants does"),
        (["--out", "plots", "--plot-tenants", "5"], "--out and --plot-tenants do"),
    ],
)
def test_evaluate_plot_flags_with_no_plots_are_refused(
    cwd: Path, capsys, flags: list[str], refused: str
) -> None:
    trace = _demand_csv(cwd / "d.csv")
    line = _refused(_evaluate(trace, "--no-plots", *flags), cwd, capsys)
    assert line == f"dprobe evaluate: {refused} not apply with --no-plots (it writes nothing)"
    assert not (cwd / "plots").exists()


def test_evaluate_seed_without_a_multi_task_model_is_refused(cwd: Path, capsys) -> None:
    # the multi-task model is the only one that draws random numbers
    trace = _demand_csv(cwd / "d.csv")
    argv = _evaluate(trace, "--no-plots", "--models", "last-value,holt-winters", "--seed", "7")
    line = _refused(argv, cwd, capsys)
    assert line == (
        "dprobe evaluate: --seed applies only with a multi-task model in --models "
        "(dprobe-mmoe or dprobe-mmoe-jobs)"
    )


def test_evaluate_tenants_whose_names_differ_in_odd_characters_get_a_plot_each(
    tmp_path: Path,
) -> None:
    from dprobe.commands.evaluate_plots import forecasts_vs_actual
    from dprobe.models.forecast.evaluation import EvalResult

    pts = [(1_590_000_000.0 + 600 * i, 2.0, 3.0, 2.5) for i in range(3)]
    tenants = ["team/a", "team_a", "team a"]
    series = {("last-value", t, 600.0): pts for t in tenants}
    paths = forecasts_vs_actual(
        EvalResult(rows=[], series=series), tmp_path, tenants=tenants, horizon_s=600.0,
        models=["last-value"],
    )  # fmt: skip
    assert len({p.name for p in paths}) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)
    assert "forecast_team_a_600s.png" in {p.name for p in paths}  # a plain name is kept
