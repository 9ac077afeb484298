"""Run one (policy, quota mode) cell on a job trace and summarise it.

Example:
    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> recs = [JobRecord(str(i), "a", 8, 0.0, 600.0, "", i + 2) for i in range(2)]
    >>> r = run_cell(recs, {"a": 1, "b": 1}, "fifo", "reactive",
    ...              settings=SimSettings(move_latency_s=0.0))
    >>> r.avg_queue_s, r.node_moves  # the second job waits for b's node, lent at 300 s
    (150.0, 1)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from dprobe.models.forecast.registry import make_forecaster
from dprobe.models.planner import Planner
from dprobe.sim.engine import QuotaMode, Simulator, StaticQuota
from dprobe.sim.foresight import ForesightQuota
from dprobe.sim.jobs import SimJob, from_records
from dprobe.sim.policies import make_policy
from dprobe.sim.quota import OracleDemand, PlannerQuota, ReactiveQuota, learned_forecast
from dprobe.sim.settings import MODES, SimSettings
from dprobe.sim.sharing import Sharing
from dprobe.traces.jobs_csv import JobRecord


@dataclass(frozen=True)
class CellResult:
    """Figures of one run, in seconds. Queueing delay = all the time a job waited (before
    its first start and after each preemption); JCT = completion - submit;
    ``alloc_ratio`` = allocated / available GPU-time from first submit to last completion.
    ``preemptions``: jobs preempted to reclaim lent nodes, ``lost_gpu_h`` the work they
    lost; ``moves_in_flight_gpu_h``: capacity that served nobody while moving;
    ``guarantee_wait_s``: per job, the part of its wait during which some of its VC's
    own nodes were away; ``policy_preemptions``: preemptions by SRTF / LAS (no work
    lost); ``oracle_pick``: which run the oracle kept (``planner``, ``foresight`` or
    ``reactive``); ``seed``: the run's seed (synthetic stream and forecaster)."""

    policy: str
    mode: str
    move_latency_s: float
    reclaim: str
    jobs: int
    skipped: int
    unfinished: int
    avg_queue_s: float
    p95_queue_s: float
    avg_jct_s: float
    alloc_ratio: float
    node_moves: int
    preemptions: int
    lost_gpu_h: float
    moves_in_flight_gpu_h: float
    guarantee_wait_s: float
    policy_preemptions: int
    makespan_s: float
    wall_s: float
    forecaster: str
    oracle_pick: str = ""
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_quota(mode: str, jobs: list[Any], settings: SimSettings) -> QuotaMode:
    """The quota mode object of ``mode`` for one run (fresh forecaster and planner); for
    ``oracle``, the planner fed the true future demand (:func:`run_one` also runs
    ``foresight``, the reactive rule told the future arrivals, and keeps the better;
    :func:`run_cell` then keeps the better of that and reactive)."""
    if mode == "static":
        return StaticQuota()
    if mode == "reactive":
        return ReactiveQuota()
    planner = Planner(settings.planner)
    lead, hold = settings.lead_s, settings.hold_s
    if mode == "predictive":
        horizons = tuple(sorted({settings.interval_s, lead}))
        model = make_forecaster(
            settings.forecaster,
            seed=settings.seed,
            calibrate=settings.calibrate,
            calibration={"horizons_s": tuple(sorted({*horizons, *([hold] if hold else [])}))},
            gate=settings.gate,
            gating={"horizon_s": lead, "level": 0.9},
        )
        return PlannerQuota("predictive", learned_forecast(model, horizons, hold_s=hold), planner)
    if mode == "oracle":
        return PlannerQuota("oracle", OracleDemand(jobs, lead, hold), planner)
    if mode == "foresight":
        return ForesightQuota(jobs)
    raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


def run_cell(
    records: Sequence[JobRecord],
    vc_nodes: dict[str, int],
    policy: str,
    mode: str,
    *,
    settings: SimSettings | None = None,
    sharing: Sharing | None = None,
) -> CellResult:
    """Simulate ``records`` on VCs of ``vc_nodes`` nodes under ``policy`` and ``mode``.

    The oracle knows the future; it plans with it in two ways (:func:`run_one`) and, with
    hindsight, keeps the best of those runs and the reactive one, whichever has the lowest
    average queueing delay, so it is never above reactive."""
    planned = run_one(records, vc_nodes, policy, mode, settings=settings, sharing=sharing)
    if mode != "oracle":
        return planned
    reactive = run_one(records, vc_nodes, policy, "reactive", settings=settings, sharing=sharing)
    return oracle_of(planned, reactive)


def oracle_of(planned: CellResult, reactive: CellResult) -> CellResult:
    """The oracle cell: the oracle's own run (``planned``) or, with hindsight, the
    ``reactive`` run of the same policy and settings, whichever waited less on average."""
    best = _better(planned, reactive)
    pick = best.oracle_pick or best.mode
    wall = planned.wall_s + reactive.wall_s
    return replace(best, mode="oracle", oracle_pick=pick, wall_s=wall)


def _better(first: CellResult, second: CellResult) -> CellResult:
    """The run that left fewer jobs never run, then waited less on average (``first`` on
    a tie): averages leave out the jobs that never ran, so they come first."""
    if (second.unfinished, second.avg_queue_s) < (first.unfinished, first.avg_queue_s):
        return second
    return first


def run_one(
    records: Sequence[JobRecord],
    vc_nodes: dict[str, int],
    policy: str,
    mode: str,
    *,
    settings: SimSettings | None,
    sharing: Sharing | None,
) -> CellResult:
    """One simulation of ``mode``; for ``oracle``, two: the planner fed the true future
    and the reactive rule told the future arrivals (``foresight``), keeping the one that
    waited less, without the hindsight choice against reactive that :func:`run_cell` adds
    (:func:`oracle_of`)."""
    s = settings or SimSettings()
    if mode != "oracle":
        return run_quota(records, vc_nodes, policy, mode, make_quota, settings=s, sharing=sharing)
    runs = [
        run_quota(records, vc_nodes, policy, how, make_quota, settings=s, sharing=sharing)
        for how in ("oracle", "foresight")
    ]
    best = _better(*runs)
    pick = "planner" if best is runs[0] else "foresight"
    wall = sum(r.wall_s for r in runs)
    return replace(best, mode="oracle", oracle_pick=pick, wall_s=wall)


QuotaOf = Callable[[str, list[SimJob], SimSettings], QuotaMode]


def run_quota(
    records: Sequence[JobRecord],
    vc_nodes: dict[str, int],
    policy: str,
    mode: str,
    quota_of: QuotaOf,
    *,
    settings: SimSettings,
    sharing: Sharing | None = None,
) -> CellResult:
    """One run with the quota mode ``quota_of(mode, jobs, settings)`` builds (the jobs are
    those the run simulates), and its figures; :func:`make_quota` builds the modes of
    ``dprobe simulate``, a benchmark may pass its own.

    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> recs = [JobRecord("0", "a", 8, 0.0, 600.0, "", 2)]
    >>> r = run_quota(recs, {"a": 1}, "fifo", "mine", lambda mode, jobs, s: StaticQuota(),
    ...               settings=SimSettings())
    >>> r.mode, r.avg_queue_s
    ('mine', 0.0)
    """
    s = settings
    t0 = time.perf_counter()
    max_gpus = sum(vc_nodes.values()) * s.node_gpus
    jobs, skipped = from_records(records, max_gpus)
    quota = quota_of(mode, jobs, s)
    sim = Simulator(
        jobs, vc_nodes, make_policy(policy, s.policy), quota, settings=s, sharing=sharing
    )
    sim.run()
    started = [j for j in jobs if j.start_s is not None]
    ends = [(j.end_s, j.submit_s) for j in jobs if j.end_s is not None]
    queue = np.array([j.waited_s for j in started], dtype=float)
    jct = np.array([end - submit for end, submit in ends], dtype=float)
    span = (max(end for end, _ in ends) - jobs[0].submit_s) if ends else 0.0
    return CellResult(
        policy=policy,
        mode=mode,
        move_latency_s=s.move_latency_s,
        reclaim=s.reclaim,
        jobs=len(jobs),
        skipped=skipped,
        unfinished=len(jobs) - len(ends),
        avg_queue_s=float(queue.mean()) if queue.size else 0.0,
        p95_queue_s=float(np.percentile(queue, 95)) if queue.size else 0.0,
        avg_jct_s=float(jct.mean()) if jct.size else 0.0,
        alloc_ratio=sim.alloc_gpu_s / (sim.capacity_gpus * span) if span > 0 else 0.0,
        node_moves=sim.node_moves,
        preemptions=sim.preemptions,
        lost_gpu_h=sim.lost_gpu_s / 3600.0,
        moves_in_flight_gpu_h=sim.in_flight_gpu_s / 3600.0,
        guarantee_wait_s=(
            float(np.mean([j.guarantee_wait_s for j in started])) if started else 0.0
        ),
        policy_preemptions=sim.policy_preemptions,
        makespan_s=span,
        wall_s=time.perf_counter() - t0,
        forecaster=s.forecaster if mode == "predictive" else "",
        seed=s.seed,
    )
