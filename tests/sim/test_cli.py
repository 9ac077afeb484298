"""``dprobe simulate``: the --json contract, errors with file and line, the chart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dprobe.cli import main

KEYS = {
    "policy",
    "mode",
    "avg_queue_s",
    "p95_queue_s",
    "avg_jct_s",
    "alloc_ratio",
    "node_moves",
    "move_latency_s",
    "reclaim",
    "seed",
    "preemptions",
    "policy_preemptions",
    "jobs",
    "unfinished",
    "lost_gpu_h",
    "moves_in_flight_gpu_h",
    "guarantee_wait_s",
    "reduction_vs_static",
    "reduction_vs_reactive",
    "oracle_gain_captured",
    "oracle_pick",
    "repeated",
}


def _trace(tmp_path: Path) -> Path:
    # VC a (1 node) gets three 8-GPU jobs at minute 0 for 20 minutes; b (2 nodes) is idle.
    p = tmp_path / "jobs.csv"
    p.write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n"
        + "".join(f"{i},a,8,0,20,vgg16\n" for i in range(3))
    )
    (tmp_path / "vcs.csv").write_text("vc,node num\na,1\nb,2\n")
    return p


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    """``dprobe simulate`` of :func:`_trace`'s jobs and VCs, then ``extra``."""
    jobs = _trace(tmp_path)
    return ["simulate", "--jobs", str(jobs), "--vcs", str(tmp_path / "vcs.csv"), *extra]


def test_json_is_one_document_with_the_contract_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _trace(tmp_path)
    code = main(
        [
            "simulate",
            "--jobs",
            str(jobs),
            "--vcs",
            str(tmp_path / "vcs.csv"),
            "--policies",
            "fifo,sjf",
            "--modes",
            "static",
            "reactive",
            "--forecaster",
            "recent-peak",
            "--move-latency",
            "0",
            "--chart",
            str(tmp_path / "c.png"),
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    rows = json.loads(out)
    assert [(r["policy"], r["mode"]) for r in rows] == [
        ("fifo", "static"),
        ("fifo", "reactive"),
        ("sjf", "static"),
        ("sjf", "reactive"),
    ]
    assert all(set(r) == KEYS for r in rows)
    # Static: the jobs run one after another on a's node: waits 0, 1200, 2400 s -> avg 1200.
    # Reactive: at the 300 s tick b lends its one lendable node (guarantee 1 of 2): the
    # second job starts at 300, the third when the first ends at 1200 -> (0+300+1200)/3.
    fifo = {r["mode"]: r for r in rows if r["policy"] == "fifo"}
    assert all((r["jobs"], r["unfinished"]) == (3, 0) for r in rows)
    assert fifo["static"]["avg_queue_s"] == 1200.0
    assert fifo["reactive"]["avg_queue_s"] == 500.0
    assert fifo["reactive"]["reduction_vs_static"] == pytest.approx(100 * 700 / 1200, abs=0.01)
    assert fifo["reactive"]["node_moves"] == 2  # lent at 300 s, home once idle for 300 s
    assert (tmp_path / "c.png").stat().st_size > 1000
    assert "4 runs" in err


def test_sweep_runs_every_latency_and_reclaim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _argv(tmp_path)
    args += ["--policies", "fifo", "--modes", "static,reactive,oracle", "--sweep"]
    args += ["--latencies", "0,600", "--chart", str(tmp_path / "s.png"), "--json"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    cells = {(r["move_latency_s"], r["reclaim"], r["mode"]): r for r in rows}
    assert len(rows) == len(cells) == 2 * 2 * 3
    # b's lent node lands 600 s after the 300 s tick: the second job waits 900 s, the
    # third starts when the first ends at 1200 s -> (0 + 900 + 1200) / 3.
    assert cells[(0.0, "wait", "reactive")]["avg_queue_s"] == 500.0
    assert cells[(600.0, "wait", "reactive")]["avg_queue_s"] == 700.0
    # two moves (lent, then home once idle), each 8 GPUs x 600 s in flight
    in_flight = cells[(600.0, "wait", "reactive")]["moves_in_flight_gpu_h"]
    assert in_flight == pytest.approx(2 * 8 * 600 / 3600, abs=0.01)
    assert all(
        cells[(lat, rec, "oracle")]["avg_queue_s"] <= cells[(lat, rec, "reactive")]["avg_queue_s"]
        for lat in (0.0, 600.0)
        for rec in ("wait", "preempt")
    )
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_pool_puts_every_job_in_one_vc_of_all_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _argv(tmp_path)
    args += ["--policies", "fifo", "--modes", "static", "--chart", "", "--json"]
    assert main([*args, "--pool"]) == 0
    out, err = capsys.readouterr()
    pooled = json.loads(out)[0]
    # One VC of 3 nodes: the three 8-GPU jobs start at once; per VC, a's one node runs them
    # one after another (waits 0, 1200, 2400 s).
    assert "1 VC, 3 nodes" in err and "pooled into one VC" in err
    assert pooled["avg_queue_s"] == 0.0
    assert pooled["node_moves"] == 0
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)[0]["avg_queue_s"] == 1200.0


def test_bad_input_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,user,num_gpu,submit_time,duration\n1,a,2,0,5\n2,a,-3,0,5\n")
    assert main(["simulate", "--jobs", str(bad), "--nodes", "2", "--chart", ""]) == 2
    assert "bad.csv:3: num_gpu must be a whole number" in capsys.readouterr().err
    assert (
        main(["simulate", "--jobs", str(_trace(tmp_path)), "--nodes", "2", "--policies", "lifo"])
        == 2
    )
    assert "unknown policy lifo" in capsys.readouterr().err
    assert main(["simulate", "--jobs", str(tmp_path / "missing.csv"), "--nodes", "2"]) == 2


def _helios(tmp_path: Path, days: int) -> Path:
    """A Helios-style folder with one VC series of ``days`` days (2 GPUs busy of 8)."""
    folder = tmp_path / "helios"
    folder.mkdir()
    head = "time,running_gpu_num,pending_gpu_num,total_gpu_num,"
    head += "running_gpu_num_noless_8,pending_gpu_num_noless_8\n"
    rows = "".join(
        f"2020-05-{1 + h // 24:02d} {h % 24:02d}:{m:02d}:00,2,0,8,0,0\n"
        for h in range(24 * days)
        for m in range(60)
    )
    (folder / "vcA.csv").write_text(head + rows)
    return folder


@pytest.mark.parametrize("days", ["-2", "0", "0.01", "nan"])
def test_days_must_be_positive(
    days: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--helios", str(_helios(tmp_path, 2)), "--chart", ""]
    assert main([*args, "--days", days]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["dprobe simulate: --days must be > 0 (at least one hour, 1/24)"]


@pytest.mark.parametrize("days", ["99", "2.1", "inf"])
def test_more_days_than_the_series_holds_exit_2_saying_how_many_it_has(
    days: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _helios(tmp_path, 2)
    assert main(["simulate", "--helios", str(folder), "--days", days, "--chart", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"dprobe simulate: {folder}: {days} days asked for, but the Helios series cover only 2 days"
    ]
    args = ["--modes", "static", "--policies", "fifo", "--chart", "", "--json"]
    assert main(["simulate", "--helios", str(folder), "--days", "2", *args]) == 0  # all of it
    assert "Helios helios, 2 days" in capsys.readouterr().err


def test_one_day_reads_day_not_days(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = _helios(tmp_path, 1)
    assert main(["simulate", "--helios", str(one), "--days", "1.5", "--chart", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"dprobe simulate: {one}: 1.5 days asked for, but the Helios series cover only 1 day"
    ]
    args = ["--modes", "static", "--policies", "fifo", "--chart", "", "--json"]
    assert main(["simulate", "--helios", str(one), "--days", "1", *args]) == 0
    assert "Helios helios, 1 day);" in capsys.readouterr().err


@pytest.mark.parametrize("nodes", ["0", "-4"])
def test_nodes_must_be_at_least_one(
    nodes: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--jobs", str(_trace(tmp_path)), "--nodes", nodes]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["dprobe simulate: --nodes must be >= 1"]


def test_nodes_below_what_the_jobs_need_exit_2_naming_the_minimum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a's largest job needs 2 nodes of 8 GPUs, b's 1: fewer than 3 nodes cannot hold them
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,user,num_gpu,submit_time,duration\n0,a,16,0,5\n1,b,4,0,5\n")
    assert main(["simulate", "--jobs", str(jobs), "--nodes", "2", "--chart", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(
        "dprobe simulate: --nodes 2 is too few: the jobs need at least 3 nodes"
    )


def test_nodes_override_a_vc_file_beside_the_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _trace(tmp_path)
    (tmp_path / "philly_vc.csv").write_text("vc,node num\na,1\nb,2\n")
    args = ["simulate", "--jobs", str(jobs), "--policies", "fifo", "--modes", "static"]
    args += ["--chart", "", "--json"]
    assert main([*args, "--nodes", "5"]) == 0
    assert "1 VC, 5 nodes; 5 nodes split over the VCs" in capsys.readouterr().err
    assert main(args) == 0
    assert "2 VCs, 3 nodes; VC sizes from" in capsys.readouterr().err


def test_vc_sizes_are_given_one_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = _trace(tmp_path)
    vcs = tmp_path / "vcs.csv"
    vcs.write_text("vc,node num\na,1\n")
    assert main(["simulate", "--jobs", str(jobs), "--vcs", str(vcs), "--nodes", "5"]) == 2
    assert capsys.readouterr().err.strip() == (
        "dprobe simulate: --vcs and --nodes both size the VCs: give one"
    )
    for extra in (["--nodes", "5"], ["--vcs", str(vcs)]):  # --helios sizes them itself
        assert main(["simulate", "--helios", str(tmp_path), *extra]) == 2
        assert "--helios takes them from its series" in capsys.readouterr().err


@pytest.mark.slow
def test_predictive_beats_static_on_a_slice_of_philly(trace_dir: Path) -> None:
    # The first 3,000 jobs of Philly/Chronus MIX1 on its VC sizes, the MMoE-free quick model.
    from dprobe.sim.grid import run_grid
    from dprobe.sim.inputs import vc_nodes_from_file
    from dprobe.sim.settings import SimSettings
    from dprobe.traces.jobs_csv import read_jobs

    d = trace_dir / "philly-chronus"
    recs = read_jobs(d / "trace_job_Philly_MIX1.csv")[:3000]
    vcs = vc_nodes_from_file(recs, d / "philly_vc.csv")
    res = run_grid(
        recs,
        vcs,
        ["fifo", "las"],
        ["static", "predictive"],
        settings=SimSettings(forecaster="recent-peak"),
        progress=False,
    )
    by = {(r.policy, r.mode): r for r in res}
    for p in ("fifo", "las"):
        assert by[(p, "predictive")].avg_queue_s < by[(p, "static")].avg_queue_s
        assert by[(p, "predictive")].unfinished == 0


def test_an_empty_chart_path_writes_no_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _trace(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.iterdir())
    assert (
        main(
            [
                "simulate",
                "--jobs",
                str(jobs),
                "--vcs",
                str(tmp_path / "vcs.csv"),
                "--modes",
                "static",
                "--policies",
                "fifo",
                "--chart",
                "",
            ]
        )
        == 0
    )
    assert set(tmp_path.iterdir()) == before
    assert "| fifo | static |" in capsys.readouterr().out


def test_sweep_prints_one_line_per_latency_reclaim_and_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _argv(tmp_path, "--chart", "")
    args += ["--policies", "fifo,sjf", "--modes", "static,reactive", "--sweep"]
    assert main([*args, "--latencies", "0,600"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 + 2 * 2 * 2
    # static waits 1200 s on average whatever the latency; reactive 500 s, then 700 s
    assert lines[2].startswith("| 0 | wait | fifo | 1,200 | 500 | - | - |")
    assert any(line.startswith("| 600 | preempt | sjf | 1,200 | 700 |") for line in lines)
    assert main([*args, "--latencies", "0,x"]) == 2
    assert "--latencies" in capsys.readouterr().err


def test_an_empty_grid_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _argv(tmp_path, "--chart", "")
    assert main([*args, "--policies", ","]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "dprobe simulate: --policies: need one or more of fifo, sjf, srtf, qssf, las"
    ]


def test_jobs_that_never_run_are_reported_not_hidden_in_the_averages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # VC a (1 node) gets a 16-GPU job, which fits only with a node borrowed from b
    (tmp_path / "jobs.csv").write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n0,a,16,0,20,vgg16\n1,a,8,0,20,vgg16\n"
    )
    (tmp_path / "vcs.csv").write_text("vc,node num\na,1\nb,2\n")
    args = ["simulate", "--jobs", str(tmp_path / "jobs.csv"), "--vcs", str(tmp_path / "vcs.csv")]
    args += ["--policies", "fifo", "--modes", "static", "reactive", "oracle", "--chart", ""]
    assert main([*args, "--forecaster", "recent-peak", "--json"]) == 0
    out, err = capsys.readouterr()
    by = {r["mode"]: r for r in json.loads(out)}
    assert (by["static"]["jobs"], by["static"]["unfinished"]) == (2, 1)
    assert by["reactive"]["unfinished"] == by["oracle"]["unfinished"] == 0
    assert "fifo/static (seed 0): 1 job never finished (no room for it" in err
    assert main([*args, "--forecaster", "recent-peak"]) == 0
    table = capsys.readouterr().out
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
    static = next(line for line in table.splitlines() if "| static |" in line)
    assert static.strip("|").split("|")[header.index("unfinished")].strip() == "1"


def test_the_oracle_prefers_the_run_that_left_no_job_unfinished() -> None:
    from dataclasses import replace

    from dprobe.sim.run import CellResult, oracle_of

    base = CellResult("fifo", "oracle", 0.0, "wait", 2, 0, 0, 50.0, 50.0, 50.0, 0.5, 0, 0,
                      0.0, 0.0, 0.0, 0, 1.0, 0.1, "", "planner")  # fmt: skip
    starved = replace(base, unfinished=1, avg_queue_s=10.0)  # lower average, one job starved
    reactive = replace(base, mode="reactive", oracle_pick="")
    assert oracle_of(starved, reactive).oracle_pick == "reactive"
    assert oracle_of(replace(base, avg_queue_s=10.0), reactive).oracle_pick == "planner"


_IGNORED_WITH_STATIC = [
    (["--latencies", "5"], "--latencies applies only with --sweep"),
    (["--days", "3"], "--days applies only with --helios"),
    (["--share-models", "vgg16"], "--share-models applies only with --colocate"),
    (["--sweep", "--move-latency", "900"], "--move-latency does not apply with --sweep"),
    (["--sweep", "--reclaim", "preempt"], "--reclaim does not apply with --sweep"),
    (["--move-latency", "900"], "--move-latency does not apply with --modes static"),
    (
        ["--reclaim", "preempt", "--move-latency", "0"],
        "--move-latency and --reclaim do not apply with --modes static (static quotas",
    ),
    (["--checkpoint-interval", "600"], "--checkpoint-interval does not apply with --modes"),
    (["--sweep"], "--sweep does not apply with --modes static: it varies the move latency"),
]
_IGNORED_OTHERWISE = [
    (
        ["--modes", "reactive", "--checkpoint-interval", "600"],
        "--checkpoint-interval applies only with --reclaim preempt or --sweep",
    ),
    (
        ["--modes", "oracle", "--reclaim", "wait", "--checkpoint-interval", "0"],
        "--checkpoint-interval applies only with --reclaim preempt or --sweep",
    ),
    (
        ["--pool", "--modes", "static,reactive,oracle"],
        "--pool runs static quotas only (one VC of every node has no quota to move): drop "
        "--modes reactive, oracle",
    ),
    (["--pool", "--sweep"], "--sweep does not apply with --pool"),
    (["--pool", "--reclaim", "preempt"], "--reclaim does not apply with --pool"),
]


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--modes", "static", *extra], message) for extra, message in _IGNORED_WITH_STATIC]
    + _IGNORED_OTHERWISE,
)
def test_a_flag_that_would_be_ignored_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    args = _argv(tmp_path, "--chart", "")
    assert main([*args, "--policies", "fifo", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1


def test_pool_alone_runs_static_only_and_checkpoints_apply_to_preempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _argv(tmp_path)
    args += ["--policies", "fifo,sjf", "--chart", "", "--json"]
    assert main([*args, "--pool"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["policy"], r["mode"]) for r in rows] == [("fifo", "static"), ("sjf", "static")]
    preempt = ["--modes", "reactive", "--reclaim", "preempt", "--checkpoint-interval", "0"]
    assert main([*args, *preempt]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["mode"] for r in rows} == {"reactive"}
    assert all(r["lost_gpu_h"] == 0.0 for r in rows)


def test_time_unit_applies_only_to_a_job_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--helios", "/nonexistent", "--time-unit", "1", "--chart", ""]) == 2
    assert "--time-unit applies only with --jobs" in capsys.readouterr().err


def _predictive(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    argv = _argv(tmp_path)
    argv += ["--policies", "fifo", "--modes", "predictive", "--forecaster", "recent-peak"]
    argv += ["--move-latency", "0", "--chart", "", "--json", *extra]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    (row,) = json.loads(out)
    return {**row, "stderr": err}


def test_worker_planner_plans_with_the_workers_rate_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the planner's defaults lend b's idle nodes to a's waiting jobs
    default = _predictive(tmp_path, capsys)
    assert default["node_moves"] > 0 and "planner as the worker's" not in default["stderr"]
    # a worker that may not grow any quota (0 nodes, 0 % per period) and does not serve
    # waiting jobs first never moves a node: the simulator plans as that worker would
    toml = tmp_path / "worker.toml"
    toml.write_text(
        "[worker]\nplan_scale_up_max_nodes = 0\nplan_scale_up_max_percent = 0\n\n"
        # a production file: its TLS files are on the worker's host, not here
        '[kafka]\nsecurity_protocol = "SSL"\nssl_cafile = "/nonexistent/ca.pem"\n'
    )
    monkeypatch.setenv("DPROBE_WORKER_PLAN_URGENT_FIRST", "false")
    frozen = _predictive(tmp_path, capsys, "--worker-planner", "--config", str(toml))
    assert frozen["node_moves"] == 0
    assert frozen["avg_queue_s"] > default["avg_queue_s"]
    assert "per 15 s up at most max(0 %, 0 nodes)" in frozen["stderr"]
    assert "waiting jobs not first" in frozen["stderr"]
    # without the flag the same settings change nothing
    assert _predictive(tmp_path, capsys, "--config", str(toml))["node_moves"] > 0


def test_worker_planner_needs_a_mode_that_plans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _trace(tmp_path)
    argv = ["simulate", "--jobs", str(jobs), "--modes", "static,reactive", "--worker-planner"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "dprobe simulate: --worker-planner applies only with --modes predictive or oracle"
    )


def test_the_predictive_forecaster_is_named_only_when_predictive_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "predictive forecaster: recent-peak" in _predictive(tmp_path, capsys)["stderr"]
    argv = _argv(tmp_path, "--chart", "")
    assert main([*argv, "--policies", "fifo", "--modes", "static", "reactive"]) == 0
    err = capsys.readouterr().err
    assert " runs in " in err and "predictive forecaster" not in err


def test_a_chart_that_cannot_be_written_keeps_the_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dprobe.sim.report

    def refuse(*args: object, **kwargs: object) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dprobe.sim.report, "chart", refuse)
    args = _argv(tmp_path, "--json")
    args += ["--policies", "fifo", "--modes", "static", "--chart", str(tmp_path / "c.png")]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert [r["mode"] for r in json.loads(out)] == ["static"]  # printed before the chart
    assert "--chart" in err and "No space left on device" in err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_chart_folder_that_refuses_files_exits_2_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _argv(tmp_path)
    assert main([*args, "--policies", "fifo", "--chart", "/proc/x.png"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "--chart /proc/x.png: cannot write in /proc" in err
    assert "runs in" not in err  # refused before simulating


def test_a_sweep_counts_static_once_per_policy_and_marks_its_repeated_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _argv(tmp_path, "--chart", "")
    args += ["--policies", "fifo,srtf", "--sweep", "--latencies", "0,900", "--json"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)
    # 2 policies x (static once + 3 modes x 2 latencies x 2 reclaim rules)
    assert len(rows) == 32
    assert "26 runs (32 cells: static run once per policy" in err
    static = [r for r in rows if r["mode"] == "static"]
    assert len(static) == 8
    assert [r["policy"] for r in static if not r["repeated"]] == ["fifo", "srtf"]
    assert sum(not r["repeated"] for r in rows) == 26
    assert not any(r["repeated"] for r in rows if r["mode"] != "static")


def test_counts_of_one_are_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "jobs.csv").write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n0,a,8,0,20,vgg16\n"
    )
    (tmp_path / "vcs.csv").write_text("vc,node num\na,1\n")
    args = ["simulate", "--jobs", str(tmp_path / "jobs.csv"), "--vcs", str(tmp_path / "vcs.csv")]
    assert main([*args, "--policies", "fifo", "--modes", "static", "--chart", ""]) == 0
    err = capsys.readouterr().err
    assert "1 job (jobs.csv); 1 VC, 1 node;" in err
    assert "1 run in " in err and "; 0 jobs left out" in err


def test_the_quota_settings_used_are_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The settings a run was made with are on stderr, as given (a saved report says them),
    and a static-only run prints none (it moves nothing)."""
    (tmp_path / "jobs.csv").write_text(
        "job_id,user,num_gpu,submit_time,duration,model_name\n0,a,8,0,20,vgg16\n1,b,8,1,20,vgg16\n"
    )
    (tmp_path / "vcs.csv").write_text("vc,node num\na,1\nb,1\n")
    args = ["simulate", "--jobs", str(tmp_path / "jobs.csv"), "--vcs", str(tmp_path / "vcs.csv")]
    given = ["--interval", "120", "--guarantee", "0.25", "--horizon", "1200", "--no-gate"]
    assert main([*args, *given, "--reclaim", "preempt", "--checkpoint-interval", "900",
                 "--policies", "fifo", "--modes", "predictive", "--forecaster", "last-value",
                 "--chart", ""]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert (
        "quota settings: planning every 120 s, guarantee 0.25 of each quota, forecast horizon "
        "1200 s, lend horizon 900 s, forecast gate off (--no-gate), checkpoint every 900 s of "
        "work (preempt)\n"
    ) in err
    assert main([*args, "--policies", "fifo", "--modes", "static", "--chart", ""]) == 0
    assert "quota settings" not in capsys.readouterr().err


def test_an_interval_that_plans_too_often_over_the_trace_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the jobs of _trace run for 20 minutes: 1,200 s / 0.001 s = 1.2 million planning
    # intervals, over the bound of a million (a run would take hours)
    assert main(_argv(tmp_path, "--modes", "reactive", "--interval", "0.001")) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert err.startswith("dprobe simulate: --interval 0.001: the jobs span 20.0 min, 1,200,000")
    suggested = float(err.rsplit("give --interval ", 1)[1].split()[0])
    # the interval suggested is the smallest to 3 digits that the bound lets through
    assert 1200 / suggested <= 1_000_000 * (1 + 1e-9) < 1200 / (suggested * 0.99)
