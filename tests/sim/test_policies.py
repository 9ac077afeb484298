"""Each policy against a schedule computed by hand on a tiny trace (one VC, one 8-GPU node).

Notation in comments: jN(submit, GPUs, duration). Times in seconds.
"""

from __future__ import annotations

from dprobe.sim.engine import Simulator
from dprobe.sim.jobs import SimJob
from dprobe.sim.policies import PolicySettings, make_policy
from dprobe.sim.settings import SimSettings


def _jobs(spec: list[tuple[float, int, float, str]]) -> list[SimJob]:
    return [
        SimJob(i, "a", gpus=g, submit_s=t, duration_s=d, model=m)
        for i, (t, g, d, m) in enumerate(spec)
    ]


def _run(policy: str, jobs: list[SimJob], settings: SimSettings | None = None) -> Simulator:
    s = settings or SimSettings()
    return Simulator(jobs, {"a": 1}, make_policy(policy, s.policy), settings=s).run()


def _schedule(jobs: list[SimJob]) -> list[tuple[float | None, float | None, float]]:
    return [(j.start_s, j.end_s, j.waited_s) for j in jobs]


# j0(0, 8, 100) j1(10, 4, 50) j2(20, 4, 30) j3(30, 8, 10)
TRACE = [(0.0, 8, 100.0, ""), (10.0, 4, 50.0, ""), (20.0, 4, 30.0, ""), (30.0, 8, 10.0, "")]


def test_fifo() -> None:
    # j0 runs 0-100. At 100 the queue is j1, j2, j3 in submit order: j1 and j2 fit side by
    # side (100-150, 100-130); j3 needs the whole node: at 130 only 4 GPUs are free, so it
    # starts when j1 ends, 150-160.
    jobs = _jobs(TRACE)
    _run("fifo", jobs)
    assert _schedule(jobs) == [(0, 100, 0), (100, 150, 90), (100, 130, 80), (150, 160, 120)]


def test_sjf_uses_true_durations() -> None:
    # At 100 the queue by duration is j3 (10), j2 (30), j1 (50): j3 takes the node 100-110,
    # then j2 110-140 and j1 110-160 side by side.
    jobs = _jobs(TRACE)
    _run("sjf", jobs)
    assert _schedule(jobs) == [(0, 100, 0), (110, 160, 100), (110, 140, 90), (100, 110, 70)]


def test_srtf_preempts_for_less_remaining_time() -> None:
    # 10: j1 (50 left) beats j0 (90 left): j0 stopped, j1 runs 10-.. on 4 GPUs.
    # 20: j2 (30) takes the 4 free GPUs.
    # 30: j3 (10) needs 8: stops j1 (30 left) and j2 (20 left); runs 30-40.
    # 40: j2 (20 left) and j1 (30 left) resume: j2 40-60, j1 40-70; j0 needs 8 GPUs.
    # 70: j0 resumes with 90 left: 70-160.
    # Waiting: j0 10->70 = 60; j1 30->40 = 10; j2 30->40 = 10; j3 none.
    jobs = _jobs(TRACE)
    sim = _run("srtf", jobs)
    assert _schedule(jobs) == [(0, 160, 60), (10, 70, 10), (20, 60, 10), (30, 40, 0)]
    assert sim.policy_preemptions == 3


def test_qssf_ranks_by_predicted_duration_times_gpus() -> None:
    # j0(0, 4, 10, m) and j1(0, 4, 100, big) start at 0. j0 ends at 10: history a/m = [10].
    # j2(5, 8, 10, x) arrives with no history at all: default 3600 s x 8 GPUs = 28800.
    # j3(20, 8, 50, m) is predicted from a/m: 10 s x 8 = 80, so it overtakes j2.
    # At 100 (j1 ends) j3 runs 100-150, then j2 150-160. (FIFO would run j2 first.)
    spec = [(0.0, 4, 10.0, "m"), (0.0, 4, 100.0, "big"), (5.0, 8, 10.0, "x"), (20.0, 8, 50.0, "m")]
    jobs = _jobs(spec)
    _run("qssf", jobs)
    assert [j.pred_s for j in jobs] == [3600.0, 3600.0, 3600.0, 10.0]
    assert _schedule(jobs) == [(0, 10, 0), (0, 100, 0), (150, 160, 145), (100, 150, 80)]
    fifo = _jobs(spec)
    _run("fifo", fifo)
    assert [j.start_s for j in fifo][2:] == [100, 110]


def test_qssf_falls_back_from_model_to_tenant_history() -> None:
    # Finished: a/m 10 s and a/n 30 s. A new job of model "q" gets the tenant mean, 20 s.
    p = make_policy("qssf")
    for d, m in [(10.0, "m"), (30.0, "n")]:
        p.on_finish(SimJob(0, "a", gpus=1, submit_s=0.0, duration_s=d, model=m))
    new = SimJob(1, "a", gpus=1, submit_s=0.0, duration_s=1.0, model="q")
    p.on_submit(new)
    assert new.pred_s == 20.0


def test_las_two_queues_with_demotion() -> None:
    # Threshold 100 GPU-s. j0(0, 8, 100): queue 0 until 100/8 = 12.5 s of running, then 1.
    # j1(20, 4, 10): queue 0 beats queue-1 j0: j0 stopped at 20 (80 left); j1 runs 20-30.
    # 30: j0 resumes (queue 1). j2(40, 2, 30): queue 0: stops j0 again (70 left); j2 40-70.
    # 70: j0 resumes with 70 left: 70-140. Waiting: j0 20->30 + 40->70 = 40.
    s = SimSettings(policy=PolicySettings(las_threshold_gpu_s=100.0))
    jobs = _jobs([(0.0, 8, 100.0, ""), (20.0, 4, 10.0, ""), (40.0, 2, 30.0, "")])
    sim = _run("las", jobs, s)
    assert _schedule(jobs) == [(0, 140, 40), (20, 30, 0), (40, 70, 0)]
    assert [j.queue for j in jobs] == [1, 0, 0]
    assert sim.policy_preemptions == 2


def test_large_jobs_take_whole_nodes_and_small_ones_best_fit() -> None:
    # Two VCs' worth of nodes in one VC: 3 nodes. j0(0, 3, 50) goes to node 0; j1(0, 4, 50)
    # best-fits next to it on node 0 (5 free there, the fullest node that fits);
    # j2(0, 12, 50) needs two whole free nodes: nodes 1 and 2.
    jobs = _jobs([(0.0, 3, 50.0, ""), (0.0, 4, 50.0, ""), (0.0, 12, 50.0, "")])
    sim = Simulator(jobs, {"a": 3}, make_policy("fifo"))
    sim.run()
    assert all(j.start_s == 0.0 for j in jobs)
    # the 12-GPU job holds 16 GPUs (two whole nodes): 3 + 4 + 16 = 23 GPUs for 50 s
    assert sim.alloc_gpu_s == 23 * 50
    vc = Simulator(_jobs([]), {"a": 3}, make_policy("fifo")).vcs["a"]
    for job, want in [("j0", [(0, 3)]), ("j1", [(0, 4)]), ("j2", [(1, 8), (2, 8)])]:
        slot = vc.find_slot({"j0": 3, "j1": 4, "j2": 12}[job])
        assert slot is not None
        assert [(n.idx, g) for n, g in slot] == want
        vc.allocate(job, slot)


def test_srtf_clears_whole_nodes_for_a_multi_node_job() -> None:
    # Two nodes. j0(0, 8, 100) fills node 0; j1(0, 4, 100) and j2(0, 4, 100) share node 1.
    # j3(10, 16, 20) needs both nodes whole and has less left (20 < 90): all three stop at
    # 10, j3 runs 10-30, then j0, j1, j2 resume with 90 left each: 30-120. Waits 20 each.
    jobs = _jobs(
        [(0.0, 8, 100.0, ""), (0.0, 4, 100.0, ""), (0.0, 4, 100.0, ""), (10.0, 16, 20.0, "")]
    )
    sim = Simulator(jobs, {"a": 2}, make_policy("srtf")).run()
    assert _schedule(jobs) == [(0, 120, 20), (0, 120, 20), (0, 120, 20), (10, 30, 0)]
    assert sim.policy_preemptions == 3
