"""Reconfiguration costs, checked against hand-computed schedules: a node in flight serves
nobody for the move latency, a reclaim either waits for the borrower's job or preempts it
(which loses exactly its work since its last checkpoint), and the oracle is never above
reactive."""

from __future__ import annotations

import math
import random

import pytest

from dprobe.sim.engine import Simulator
from dprobe.sim.jobs import SimJob
from dprobe.sim.policies import make_policy
from dprobe.sim.quota import ReactiveQuota
from dprobe.sim.run import make_quota, run_cell, run_one
from dprobe.sim.settings import SimSettings
from dprobe.traces.jobs_csv import JobRecord


def _job(i: int, tenant: str, t: float, g: int, d: float) -> SimJob:
    return SimJob(i, tenant, gpus=g, submit_s=t, duration_s=d)


def _run(jobs: list[SimJob], vcs: dict[str, int], **settings: float | str) -> Simulator:
    s = SimSettings(**settings)  # type: ignore[arg-type]
    return Simulator(jobs, vcs, make_policy("fifo"), ReactiveQuota(), settings=s).run()


def test_a_node_in_flight_serves_nobody_for_the_latency() -> None:
    # a (1 node) runs job 0 and has job 1 waiting; b (2 nodes, keeps 1) lends one at the
    # 300 s tick; it lands at 800 s, not before. Once idle for a whole interval (job 1
    # ends at 900 s, tick at 1200 s) it goes home: a second 500 s in flight.
    jobs = [_job(0, "a", 0.0, 8, 2000.0), _job(1, "a", 10.0, 8, 100.0)]
    sim = _run(jobs, {"a": 1, "b": 2}, move_latency_s=500.0)
    assert jobs[1].start_s == 800.0
    assert jobs[1].waited_s == 790.0
    assert sim.node_moves == 2
    assert sim.in_flight_gpu_s == 2 * 8 * 500.0
    home = sim.vcs["b"]
    assert len(home.nodes) == 2 and home.away == 0 and not sim.vcs["a"].in_flight


def _reclaim_trace() -> list[SimJob]:
    # b (1 node) runs b0 and borrows one of a's 2 nodes for b1 at the 300 s tick; a then
    # needs both its nodes for a 16-GPU job at 2,800 s; b2 arrives at 3,000 s.
    return [
        _job(0, "b", 0.0, 8, 100_000.0),
        _job(1, "b", 0.0, 8, 100_000.0),
        _job(2, "a", 2800.0, 16, 500.0),
        _job(3, "b", 3000.0, 8, 50.0),
    ]


@pytest.mark.parametrize("latency", [0.0, 200.0])
def test_preempt_loses_exactly_the_work_since_the_last_checkpoint(latency: float) -> None:
    jobs = _reclaim_trace()
    b0, b1, a0, _ = jobs
    sim = _run(
        jobs,
        {"a": 2, "b": 1},
        move_latency_s=latency,
        reclaim="preempt",
        checkpoint_interval_s=1000.0,
    )
    started = 300.0 + latency  # b1 on a's node once it has landed
    done = 2800.0 - started
    lost = done % 1000.0
    assert sim.preemptions == 1
    assert sim.lost_gpu_s == pytest.approx(8 * lost)
    assert a0.start_s == 2800.0 + latency  # the node home after the latency
    assert a0.guarantee_wait_s == pytest.approx(latency)
    # a0 ends 500 s after it starts; at the next tick (every 300 s) b borrows the idle
    # node again and b1, first in FIFO order, resumes once it has landed, redoing `lost`
    resume = math.ceil((a0.start_s + 500.0) / 300.0) * 300.0 + latency
    assert b1.end_s == pytest.approx(resume + 100_000.0 - done + lost)
    assert b1.waited_s == pytest.approx(started + resume - 2800.0)
    assert b0.end_s == 100_000.0


def test_wait_lets_the_borrower_finish_and_starts_nothing_new_on_the_node() -> None:
    jobs = _reclaim_trace()
    b0, b1, a0, b2 = jobs
    sim = _run(jobs, {"a": 2, "b": 1}, move_latency_s=0.0, reclaim="wait")
    assert sim.preemptions == 0 and sim.lost_gpu_s == 0.0
    assert b1.end_s == 300.0 + 100_000.0
    assert a0.start_s == b1.end_s  # the recalled node went home once idle
    assert a0.guarantee_wait_s == pytest.approx(a0.start_s - 2800.0)
    # b2 never started on the draining node: it waited for b's own node
    assert b2.start_s == b0.end_s == 100_000.0


def _random_trace(seed: int) -> tuple[list[JobRecord], dict[str, int]]:
    rng = random.Random(seed)
    recs = []
    for i in range(240):
        vc = rng.choice("abc")
        burst = 20_000.0 * (ord(vc) - 97)  # each VC bursts at its own time
        t = burst + rng.expovariate(1 / 400.0) * (i % 40)
        recs.append(
            JobRecord(
                str(i),
                vc,
                rng.choice([1, 2, 4, 8, 8, 16]),
                t,
                rng.lognormvariate(7.0, 1.2),
                "",
                i + 2,
            )
        )
    return recs, {"a": 3, "b": 2, "c": 4}


@pytest.mark.parametrize("policy", ["fifo", "sjf", "srtf", "qssf", "las"])
def test_the_oracle_is_never_above_reactive(policy: str) -> None:
    """The oracle cell is the better of the oracle's own plan (planner or foresight, run
    here on its own) and reactive: never above reactive, and below it wherever its own
    plan waits less (an oracle that only copied reactive would not be)."""
    recs, vcs = _random_trace(7)
    own_wins = 0
    for latency in (0.0, 300.0, 900.0):
        for reclaim in ("wait", "preempt"):
            s = SimSettings(move_latency_s=latency, reclaim=reclaim)
            oracle = run_cell(recs, vcs, policy, "oracle", settings=s)
            reactive = run_cell(recs, vcs, policy, "reactive", settings=s)
            own = run_one(recs, vcs, policy, "oracle", settings=s, sharing=None)
            assert oracle.unfinished == reactive.unfinished == own.unfinished == 0
            assert oracle.avg_queue_s <= reactive.avg_queue_s, (latency, reclaim)
            assert oracle.avg_queue_s == min(own.avg_queue_s, reactive.avg_queue_s)
            if own.avg_queue_s <= reactive.avg_queue_s:
                assert oracle.oracle_pick == own.oracle_pick in ("planner", "foresight")
                own_wins += own.avg_queue_s < reactive.avg_queue_s
            else:
                assert oracle.oracle_pick == "reactive"
    assert own_wins > 0, "the case should have a cell where the oracle's own plan pays"


@pytest.mark.parametrize(
    ("reclaim", "checkpoint_s", "b1_start"),
    [
        ("preempt", 1800.0, 2100.0),  # a needs its nodes at 1,500 s, within 1,800: kept
        ("preempt", 600.0, 300.0),  # 1,500 s is beyond one checkpoint interval: lent
        ("preempt", 0.0, 300.0),  # a preemption loses nothing: nothing is held
        ("wait", 1800.0, 300.0),  # a reclaim only waits: nothing is held
    ],
)
def test_under_preempt_an_owner_keeps_what_it_needs_within_a_checkpoint_interval(
    reclaim: str, checkpoint_s: float, b1_start: float
) -> None:
    # b (1 node) runs a long job; b1 waits from 0 s. a (2 nodes, keeps 1) is idle until a
    # 16-GPU job arrives at 1,500 s. The oracle's planner (told the arrival) lends a's
    # spare node at the 300 s tick unless a is held for its own job to come; held, b1
    # starts when a's job ends (1,500 + 600 s).
    jobs = [
        _job(0, "b", 0.0, 8, 50_000.0),
        _job(1, "b", 0.0, 8, 600.0),
        _job(2, "a", 1500.0, 16, 600.0),
    ]
    s = SimSettings(move_latency_s=0.0, reclaim=reclaim, checkpoint_interval_s=checkpoint_s)
    quota = make_quota("oracle", jobs, s)
    sim = Simulator(jobs, {"a": 2, "b": 1}, make_policy("fifo"), quota, settings=s).run()
    assert jobs[1].start_s == b1_start
    assert jobs[2].start_s == 1500.0 and sim.preemptions == 0
