"""Quota modes: how idle nodes move between VCs at every planning tick.

- ``static``: never (:class:`~dprobe.sim.engine.StaticQuota`);
- ``reactive``: a VC with waiting jobs gets the idle nodes it needs to place them now
  (``ceil(waiting GPUs / 8)`` minus its own idle nodes), from VCs with nothing waiting,
  above their guarantee; the neediest VC first, from the donor with most idle nodes;
- ``predictive``: dprobe's forecaster learns each VC's demand window and forecasts it;
  the quota planner (:mod:`dprobe.models.planner`, unchanged) turns the forecasts, and
  each VC's need now at node granularity (:func:`need_gpus`), into a zero-sum plan of
  node moves;
- ``oracle``: the same planner fed the true future demand (a ceiling for forecasting).

Example:
    >>> from dprobe.sim.engine import Simulator
    >>> from dprobe.sim.jobs import SimJob
    >>> from dprobe.sim.policies import make_policy
    >>> jobs = [SimJob(0, "a", gpus=16, submit_s=0.0, duration_s=900.0)]
    >>> sim = Simulator(jobs, {"a": 1, "b": 2}, make_policy("fifo"), ReactiveQuota()).run()
    >>> jobs[0].start_s, sim.node_moves  # waits for the first tick at 300 s
    (300.0, 1)
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dprobe.models.planner import PlanInput, Planner, TenantState
from dprobe.schema import LevelCounts, TenantWindow
from dprobe.sim.cluster import VC, Node
from dprobe.sim.flow import SimFlow

if TYPE_CHECKING:
    from dprobe.sim.engine import Simulator
    from dprobe.sim.jobs import SimJob

Moves = list[tuple[Node, VC, VC]]


def need_gpus(vc: VC, max_jobs: int = 512) -> int:
    """What ``vc`` needs now in whole nodes: its busy nodes, plus new nodes for its waiting
    jobs (the first ``max_jobs`` in queue order), packed best-fit largest first into the
    free GPUs of busy nodes and then into new nodes; a job larger than a node takes whole
    nodes.

    >>> from dprobe.sim.cluster import Node
    >>> from dprobe.sim.jobs import SimJob
    >>> vc = VC("a", 8)
    >>> for i in range(3): vc.add_node(Node(i, 8))
    >>> for i in range(3): vc.allocate(f"run{i}", [(vc.nodes[i], 6)])  # 2 free on each
    >>> vc.enqueue((0,), SimJob(0, "a", gpus=4, submit_s=0.0, duration_s=1.0))
    >>> need_gpus(vc)  # 3 busy nodes + 1 new: the 4 GPUs do not fit in 2+2+2
    32
    """
    g = vc.node_gpus
    frees = sorted(n.free for n in vc.nodes.values() if n.jobs)
    busy = len(frees)
    new = 0
    for size in sorted((j.gpus for _, j in vc.pending[:max_jobs]), reverse=True):
        if size > g:
            new += -(-size // g)
            continue
        k = bisect.bisect_left(frees, size)
        if k == len(frees):
            new += 1
            bisect.insort(frees, g - size)
        else:
            bisect.insort(frees, frees.pop(k) - size)
    return (busy + new) * g


def _lendable(vc: VC) -> list[Node]:
    idle = vc.idle_nodes()
    return idle[: max(0, min(len(idle), len(vc.nodes) - vc.guaranteed_nodes))]


class ReactiveQuota:
    """Move idle nodes to VCs that have jobs waiting right now (see module doc)."""

    name = "reactive"

    def step(self, sim: Simulator, now: float) -> Moves:
        g = sim.s.node_gpus
        need = {}
        for vc in sim.vcs.values():
            if vc.pending:
                n = -(-vc.pending_gpus // g) - len(vc.idle_nodes())
                if n > 0:
                    need[vc.name] = n
        if not need:
            return []
        offer = {vc.name: _lendable(vc) for vc in sim.vcs.values() if not vc.pending}
        recv = [(-n, name) for name, n in need.items()]
        don = [(-len(nodes), name) for name, nodes in offer.items() if nodes]
        heapq.heapify(recv)
        heapq.heapify(don)
        moves: Moves = []
        while recv and don:
            n, r = heapq.heappop(recv)
            _, d = heapq.heappop(don)
            moves.append((offer[d].pop(0), sim.vcs[d], sim.vcs[r]))
            if n + 1 < 0:
                heapq.heappush(recv, (n + 1, r))
            if offer[d]:
                heapq.heappush(don, (-len(offer[d]), d))
        return moves


Forecast = Callable[["Simulator", float], dict[str, tuple[float, float]]]


class PlannerQuota:
    """Planner-driven quotas from a forecast function ``(sim, now) -> {vc: (p50, p90)}``."""

    def __init__(self, name: str, forecast: Forecast, planner: Planner) -> None:
        self.name = name
        self.forecast = forecast
        self.planner = planner
        self.plans = 0

    def step(self, sim: Simulator, now: float) -> Moves:
        g = sim.s.node_gpus
        tenants = []
        forecasts = self.forecast(sim, now)
        for vc in sim.vcs.values():
            p50, p90 = forecasts[vc.name]
            tenants.append(
                TenantState(
                    vc.name,
                    quota_gpus=vc.quota_gpus,
                    guaranteed_gpus=vc.guaranteed_nodes * g,
                    idle_gpus=len(vc.idle_nodes()) * g,
                    p50=p50,
                    p90=p90,
                    horizon_s=sim.s.horizon_s,
                    need_gpus=float(need_gpus(vc)),
                )
            )
        plan = self.planner.plan(
            PlanInput(ts=now, capacity_gpus=sim.capacity_gpus, tenants=tuple(tenants))
        )
        self.plans += 1
        freed: list[tuple[Node, VC]] = []
        for d in plan.moves:
            if d.delta_gpus < 0:
                vc = sim.vcs[d.tenant]
                freed.extend((node, vc) for node in vc.idle_nodes()[: -d.delta_gpus // g])
        moves: Moves = []
        for d in plan.moves:
            for _ in range(d.delta_gpus // g if d.delta_gpus > 0 else 0):
                node, src = freed.pop(0)
                moves.append((node, src, sim.vcs[d.tenant]))
        return moves


def window_of(sim: Simulator, vc: VC, now: float, flow: SimFlow | None = None) -> TenantWindow:
    """The VC's demand window ending now, as the stream worker would publish it
    (instantaneous running and waiting GPUs at the window's end).

    With ``flow`` (called once per tick, after :meth:`SimFlow.advance`), the window also
    carries the job flow since the last tick, and its effective demand weighs waiting
    GPUs by the level the profiler predicts for each job; running jobs count whole GPUs
    (the simulator has no utilisation to level them by).
    """
    start = max(0.0, now - sim.s.interval_s)
    job_flow, pending_eff = None, float(vc.pending_gpus)
    if flow is not None:
        job_flow, pending_eff = flow.window(sim, vc, now, start=start)
    return TenantWindow(
        tenant=vc.name,
        window_start=start,
        window_end=now,
        hosts=sum(1 for n in vc.nodes.values() if n.jobs),
        gpus_busy=float(vc.running_gpus),
        instances=float(len(vc.running)),
        util_sum=0.0,
        level_counts=LevelCounts(),
        effective_demand_gpus=float(vc.running_gpus) + pending_eff,
        pending_gpus=float(vc.pending_gpus),
        running_gpus=float(vc.running_gpus),
        quota_gpus=float(vc.quota_gpus),
        samples=1,
        flow=job_flow,
    )


def learned_forecast(
    model: Any, horizons: tuple[float, ...], flow: SimFlow | None = None
) -> Forecast:
    """Feed the model this tick's window of each VC, then forecast: the largest p50 and p90
    over ``horizons`` (the quota must cover demand until the next plan and at the horizon).
    The windows carry the job flow (``flow``, a fresh :class:`SimFlow` by default)."""
    tracker = flow or SimFlow()

    def forecast(sim: Simulator, now: float) -> dict[str, tuple[float, float]]:
        tracker.advance(sim, now)
        for vc in sim.vcs.values():
            model.learn_one(window_of(sim, vc, now, tracker))
        result = {}
        for name in sim.vcs:
            out = model.forecast(name, list(horizons)).values()
            result[name] = (max(v[0] for v in out), max(v[1] for v in out))
        return result

    return forecast


class OracleDemand:
    """True peak demand of each VC over ``(now, now + horizon]``: what is waiting now, what
    runs and will still run, and the jobs that will arrive and still run (from the trace)."""

    def __init__(self, jobs: list[SimJob], horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._future: dict[str, list[SimJob]] = {}
        for j in jobs:
            self._future.setdefault(j.tenant, []).append(j)
        self._next: dict[str, int] = dict.fromkeys(self._future, 0)

    def __call__(self, sim: Simulator, now: float) -> dict[str, tuple[float, float]]:
        return {vc.name: (p, p) for vc in sim.vcs.values() for p in [self._peak(vc, now)]}

    def _peak(self, vc: VC, now: float) -> float:
        fut = self._future.get(vc.name, [])
        i = self._next.get(vc.name, 0)
        while i < len(fut) and fut[i].submit_s <= now:
            i += 1
        self._next[vc.name] = i
        ends = [(j.gpus, now + j.remaining_s / j.speed - (now - j.last_s)) for j in vc.running]
        peak = float(vc.pending_gpus + vc.running_gpus)
        end_t = now + self.horizon_s
        k = i
        while k < len(fut) and fut[k].submit_s <= end_t:
            tau = fut[k].submit_s
            still = sum(g for g, e in ends if e > tau)
            arrived = sum(a.gpus for a in fut[i : k + 1] if a.submit_s + a.duration_s > tau)
            peak = max(peak, float(vc.pending_gpus + still + arrived))
            k += 1
        return peak
