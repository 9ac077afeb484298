"""Quota modes and GPU sharing against hand-computed schedules."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.errors import UsageError
from dprobe.models.forecast.baselines import RecentPeak
from dprobe.models.planner import Planner, PlannerSettings
from dprobe.sim.engine import Simulator
from dprobe.sim.jobs import SimJob
from dprobe.sim.policies import make_policy
from dprobe.sim.quota import OracleDemand, PlannerQuota, ReactiveQuota, learned_forecast
from dprobe.sim.settings import SimSettings
from dprobe.sim.sharing import Sharing, load_colocation

INSTANT = SimSettings(move_latency_s=0.0)  # nodes move at once: the planning logic alone


def _job(i: int, tenant: str, t: float, g: int, d: float, model: str = "") -> SimJob:
    return SimJob(i, tenant, gpus=g, submit_s=t, duration_s=d, model=model)


def test_reactive_lends_idle_nodes_above_the_guarantee() -> None:
    # a: 1 node, b: 3 nodes, guarantee half (b keeps 1). Three 8-GPU jobs of a at 0:
    # one runs at once; at the 300 s tick a needs 2 nodes, b lends 2 (3 idle - 1 kept).
    jobs = [_job(i, "a", 0.0, 8, 1000.0) for i in range(3)]
    sim = Simulator(
        jobs, {"a": 1, "b": 3}, make_policy("fifo"), ReactiveQuota(), settings=INSTANT
    ).run()
    assert [j.start_s for j in jobs] == [0.0, 300.0, 300.0]
    assert sim.node_moves == 2
    assert len(sim.vcs["b"].nodes) == 1


def test_reactive_never_takes_a_busy_node() -> None:
    # b's only spare node runs a long job: nothing can move, a's second job waits for a.
    jobs = [_job(0, "a", 0.0, 8, 1000.0), _job(1, "b", 0.0, 8, 5000.0), _job(2, "a", 1.0, 8, 10.0)]
    sim = Simulator(
        jobs,
        {"a": 1, "b": 1},
        make_policy("fifo"),
        ReactiveQuota(),
        settings=SimSettings(guarantee_fraction=0.0),
    ).run()
    assert jobs[2].start_s == 1000.0
    assert sim.node_moves == 0


def test_oracle_moves_a_node_before_the_job_arrives() -> None:
    # a: 1 node busy 0-2000. A second 8-GPU job of a arrives at 400. At the 300 s tick the
    # oracle sees a's peak demand over (300, 900] = 16 GPUs, so the planner moves one of
    # b's idle nodes (b keeps its guaranteed 1 of 2): the job starts on arrival.
    # Reactive only sees it waiting at the 600 s tick.
    def trace() -> list[SimJob]:
        return [_job(0, "a", 0.0, 8, 2000.0), _job(1, "a", 400.0, 8, 100.0)]

    jobs = trace()
    s = SimSettings(move_latency_s=0.0)
    quota = PlannerQuota("oracle", OracleDemand(jobs, s.horizon_s), Planner(s.planner))
    sim = Simulator(jobs, {"a": 1, "b": 2}, make_policy("fifo"), quota, settings=s).run()
    assert jobs[1].start_s == 400.0
    assert sim.node_moves == 1
    jobs = trace()
    Simulator(jobs, {"a": 1, "b": 2}, make_policy("fifo"), ReactiveQuota(), settings=s).run()
    assert jobs[1].start_s == 600.0


def test_an_oracle_told_part_of_the_future_plans_on_that_part_only() -> None:
    # a: 1 node, busy 0-350; a second 8-GPU job of a arrives at 400, when a's own node is
    # free again. At the 300 s tick an oracle told everything sees a peak of 8 GPUs over
    # (300, 900] and moves nothing; told only the arrival, not when the running job ends,
    # it counts that job as running on and moves one of b's nodes; told nothing, it sees
    # a's 8 GPUs now.
    def moves(knows: tuple[str, ...]) -> tuple[int, float | None]:
        jobs = [_job(0, "a", 0.0, 8, 350.0), _job(1, "a", 400.0, 8, 100.0)]
        demand = OracleDemand(jobs, INSTANT.horizon_s, knows=knows)
        quota = PlannerQuota("oracle", demand, Planner(INSTANT.planner))
        sim = Simulator(jobs, {"a": 1, "b": 2}, make_policy("fifo"), quota, settings=INSTANT)
        sim.run()
        return sim.node_moves, jobs[1].start_s

    assert moves(("arrivals", "departures")) == (0, 400.0)
    assert moves(("arrivals",))[0] >= 1
    assert moves(()) == (0, 400.0)
    with pytest.raises(ValueError, match="knows only"):
        OracleDemand([], 600.0, knows=("queue",))


def test_predictive_follows_the_forecaster_through_the_planner() -> None:
    # RecentPeak forecasts a's demand from its windows: at the 300 s tick a runs 8 and
    # has 8 waiting: p90 = 16 -> one node moves from b (2 nodes, guarantee 1).
    jobs = [_job(0, "a", 0.0, 8, 2000.0), _job(1, "a", 10.0, 8, 100.0)]
    s = SimSettings(move_latency_s=0.0)
    quota = PlannerQuota(
        "predictive", learned_forecast(RecentPeak(), (300.0, 600.0)), Planner(s.planner)
    )
    sim = Simulator(jobs, {"a": 1, "b": 2}, make_policy("fifo"), quota, settings=s).run()
    assert jobs[1].start_s == 300.0
    assert sim.node_moves == 1


def test_sharing_slows_both_jobs_and_hands_the_gpu_over() -> None:
    # One 1-GPU node. j0(0, 1 GPU, 40 s) and j1(0, 1 GPU, 100 s) of a shareable model at
    # speed 0.8 together. j0 ends at 40 / 0.8 = 50; by then j1 did 40 s of work, the
    # remaining 60 s run alone at full speed: 50-110. Without sharing j1 waits: 40-140.
    s = SimSettings(node_gpus=1, planner=PlannerSettings(node_gpus=1))
    share = Sharing({("vgg", "vgg"): 0.8}, low_level={"vgg16"}, default_speed=0.9)
    jobs = [_job(0, "a", 0.0, 1, 40.0, "vgg16"), _job(1, "a", 0.0, 1, 100.0, "vgg16")]
    sim = Simulator(jobs, {"a": 1}, make_policy("fifo"), settings=s, sharing=share).run()
    assert [(j.start_s, j.end_s) for j in jobs] == [(0.0, 50.0), (0.0, 110.0)]
    assert sim.alloc_gpu_s == 110.0  # one GPU busy the whole time
    jobs = [_job(0, "a", 0.0, 1, 40.0, "vgg16"), _job(1, "a", 0.0, 1, 100.0, "vgg16")]
    Simulator(jobs, {"a": 1}, make_policy("fifo"), settings=s).run()
    assert [(j.start_s, j.end_s) for j in jobs] == [(0.0, 40.0), (40.0, 140.0)]


def test_a_co_location_file_with_another_header_is_named_at_its_header(tmp_path: Path) -> None:
    """A jobs trace given as --colocate is refused at line 1, naming the missing columns;
    a row with a bad speed is named at its own line."""

    jobs = tmp_path / "jobs.csv"
    jobs.write_text("jobid,vc,submit_time,num_gpu,duration\nj1,a,0,1,60\n")
    with pytest.raises(UsageError, match=r"jobs\.csv:1: no model1, speed1, model2, speed2 col"):
        load_colocation(jobs)
    bad = tmp_path / "colocate.csv"
    bad.write_text("model1,speed1,model2,speed2\nvgg16,0.8,resnet50,0.7\nvgg16,x,a,1\n")
    with pytest.raises(UsageError, match=r"colocate\.csv:3: speed1 'x' is not a number$"):
        load_colocation(bad)
    short = tmp_path / "short.csv"
    short.write_text("model1,speed1,model2,speed2\nvgg16,0.8,resnet50,0.7\nvgg16,0.8\n")
    with pytest.raises(UsageError, match=r"short\.csv:3: need model1, speed1, model2, speed2"):
        load_colocation(short)
