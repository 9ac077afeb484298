"""The simulator's windows carry the job flow, recomputed here from the jobs' final
start and end times, and weigh waiting GPUs by the profiler's predicted level."""

from __future__ import annotations

import random
from typing import Any

import pytest

from dprobe.models.job_flow import FlowSettings
from dprobe.schema import TenantWindow
from dprobe.sim.engine import Simulator
from dprobe.sim.flow import SimFlow
from dprobe.sim.jobs import SimJob
from dprobe.sim.policies import make_policy
from dprobe.sim.quota import learned_forecast
from dprobe.sim.settings import SimSettings
from dprobe.sim.sharing import Sharing

EDGES = (600.0, 3600.0)
WEIGHT = {"vgg16": 0.5, "resnet50": 0.7, "alexnet": 1.0}  # L2, L3, never levelled (EX)


class _Recorder:
    """A forecaster that keeps every window it learns and forecasts nothing."""

    name = "recorder"

    def __init__(self) -> None:
        self.windows: list[TenantWindow] = []

    def learn_one(self, w: TenantWindow) -> None:
        self.windows.append(w)

    def forecast(self, tenant: str, horizons: list[float]) -> dict[float, tuple[float, float]]:
        return dict.fromkeys(horizons, (0.0, 0.0))


class _Watch:
    """A quota mode that only feeds the windows to the forecaster and moves nothing, so
    the state at a tick is the state the reference reads from the final job times."""

    name = "watch"

    def __init__(self, model: _Recorder, flow: SimFlow) -> None:
        self.forecast = learned_forecast(model, (600.0,), flow)

    def step(self, sim: Simulator, now: float) -> list[Any]:
        self.forecast(sim, now)
        return []


def _bucket(v: float) -> int:
    return sum(1 for e in EDGES if v >= e)


def test_sim_windows_carry_the_job_flow() -> None:
    rng = random.Random(4)
    jobs = [
        SimJob(
            i,
            rng.choice(["a", "b"]),
            gpus=rng.choice([1, 2, 4, 8]),
            submit_s=float(rng.randrange(0, 6000)),
            duration_s=float(rng.choice([100, 700, 4000])),
            model=rng.choice(list(WEIGHT)),
        )
        for i in range(50)
    ]
    jobs.sort(key=lambda j: j.submit_s)
    for i, j in enumerate(jobs):
        j.idx = i
    s = SimSettings()
    rec = _Recorder()
    flow = SimFlow(FlowSettings(edges_s=EDGES))
    Simulator(jobs, {"a": 1, "b": 1}, make_policy("fifo"), _Watch(rec, flow), settings=s).run()
    assert rec.windows
    checked_pending = 0
    for w in rec.windows:
        t, start = w.window_end, w.window_start
        mine = [j for j in jobs if j.tenant == w.tenant]
        run = [j for j in mine if j.start_s is not None and j.start_s <= t < (j.end_s or 1e18)]
        wait = [j for j in mine if j.submit_s <= t and (j.start_s is None or j.start_s > t)]
        f = w.flow
        assert f is not None
        ages = [0.0] * 3
        for j in run:
            assert j.start_s is not None
            ages[_bucket(t - j.start_s)] += j.gpus
        waits = [0.0] * 3
        for j in wait:
            waits[_bucket(t - j.submit_s)] += j.gpus
        assert list(f.running_by_age) == ages
        assert list(f.pending_by_wait) == waits
        assert w.pending_gpus == sum(j.gpus for j in wait)
        weighted = sum(j.gpus * WEIGHT[j.model] for j in wait)
        assert w.effective_demand_gpus == pytest.approx(w.running_gpus + weighted)
        checked_pending += bool(wait)

        def inside(x: float | None, start: float = start, t: float = t) -> bool:
            return x is not None and start < x <= t

        sub = [j for j in mine if inside(j.submit_s)]
        began = [j for j in mine if inside(j.start_s)]
        ended = [j for j in mine if inside(j.end_s)]
        assert (f.submitted_jobs, f.submitted_gpus) == (len(sub), sum(j.gpus for j in sub))
        assert (f.started_jobs, f.started_gpus) == (len(began), sum(j.gpus for j in began))
        assert (f.finished_jobs, f.finished_gpus) == (len(ended), sum(j.gpus for j in ended))
        durations = [0] * 3
        for j in ended:
            assert j.end_s is not None and j.start_s is not None
            durations[_bucket(j.end_s - j.start_s)] += 1
        assert list(f.finished_by_duration) == durations
    assert checked_pending > 0, "the case should make jobs wait"


def test_sharing_follows_the_profilers_level_unless_models_are_named() -> None:
    by_level = Sharing({}, default_speed=0.9)
    one = {m: SimJob(0, "a", gpus=1, submit_s=0.0, duration_s=1.0, model=m) for m in WEIGHT}
    assert {m: by_level.can_share(j) for m, j in one.items()} == {
        "vgg16": True,  # L2
        "resnet50": False,  # L3
        "alexnet": False,  # the profiler cannot level it
    }
    assert not by_level.can_share(
        SimJob(0, "a", gpus=2, submit_s=0.0, duration_s=1.0, model="vgg16")
    )
    named = Sharing({}, low_level={"alexnet"}, default_speed=0.9)
    assert [m for m, j in one.items() if named.can_share(j)] == ["alexnet"]
    strict = Sharing({}, default_speed=0.9, share_levels=("L1",))
    assert not strict.can_share(one["vgg16"])
