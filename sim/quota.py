"""Quota modes: how idle nodes move between VCs at every planning tick.

- ``static``: never (:class:`~dprobe.sim.engine.StaticQuota`);
- ``reactive`` (what a platform runs without dprobe: a well-tuned Kueue cohort or Slurm
  partition script): a VC with waiting jobs borrows the idle nodes it lacks to place them
  now (its need at node granularity minus what it holds or has coming), from VCs with
  nothing waiting, above their guarantee, borrowed nodes first; the neediest VC first,
  from the donor with most idle nodes; a borrowed node that stayed idle for a whole
  planning interval in a VC with nothing waiting goes home;
- ``predictive``: dprobe's forecaster learns each VC's demand window and forecasts it
  one lead ahead (move latency + one interval); the quota planner
  (:mod:`dprobe.models.planner`) turns the forecasts, each VC's need now at node
  granularity (:func:`need_gpus`) and what it is forecast to need within a borrower's
  run time (``hold``) into a zero-sum plan of node moves;
- ``oracle``: the same planner fed the true future demand; ``run.py`` also runs the
  reactive rule told the future arrivals (:mod:`dprobe.sim.foresight`) and keeps the
  best of those two runs and the reactive one: a ceiling by construction.

The engine applies the move latency and the reclaim of lent nodes to every mode alike.

Example:
    >>> from dprobe.sim.engine import Simulator
    >>> from dprobe.sim.jobs import SimJob
    >>> from dprobe.sim.policies import make_policy
    >>> from dprobe.sim.settings import SimSettings
    >>> jobs = [SimJob(0, "a", gpus=16, submit_s=0.0, duration_s=900.0)]
    >>> s = SimSettings(move_latency_s=120.0)
    >>> sim = Simulator(jobs, {"a": 1, "b": 2}, make_policy("fifo"), ReactiveQuota(),
    ...                 settings=s).run()
    >>> jobs[0].start_s, sim.node_moves  # borrowed at the first tick (300 s), lands 120 s later
    (420.0, 1)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from dprobe.models.planner import PlanInput, Planner, TenantState
from dprobe.schema import LevelCounts, TenantWindow
from dprobe.sim.cluster import VC, Node
from dprobe.sim.flow import SimFlow
from dprobe.sim.placement import need_gpus, need_nodes

if TYPE_CHECKING:
    from dprobe.sim.engine import Simulator
    from dprobe.sim.jobs import SimJob

Moves = list[tuple[Node, VC, VC]]


def lend_order(vc: VC) -> list[Node]:
    """``vc``'s idle nodes in the order it lends them: borrowed ones first (they are not
    its own, so lending them on never needs a reclaim), then its own, highest id first."""
    return sorted(vc.idle_nodes(), key=lambda n: (n.home == vc.name, -n.idx))


def lendable(vc: VC) -> list[Node]:
    """``vc``'s idle nodes above its guarantee, in lending order."""
    idle = lend_order(vc)
    return idle[: max(0, min(len(idle), vc.have_nodes - vc.guaranteed_nodes))]


def match(sim: Simulator, need: dict[str, int], offer: dict[str, list[Node]]) -> Moves:
    """Moves that give each VC of ``need`` (nodes short) nodes of ``offer`` (each donor's
    lendable nodes, in lending order): the neediest VC first, from the donor with most to
    lend. ``offer`` is consumed."""
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


def send_home(
    sim: Simulator, now: float, moves: Moves, room: dict[str, int] | None = None
) -> Moves:
    """``moves`` plus, in each VC with nothing waiting, its borrowed nodes that stayed idle
    a whole planning interval and were not just lent on: they go home (at most
    ``room[vc]`` of them when ``room`` is given; a VC missing from it sends none)."""
    lent = {node.idx for node, _, _ in moves}
    out = list(moves)
    for vc in sim.vcs.values():
        if vc.pending:
            continue
        left = len(vc.nodes) if room is None else room.get(vc.name, 0)
        for node in vc.idle_nodes():
            if left <= 0:
                break
            stale = now - node.idle_since >= sim.s.interval_s
            if node.home != vc.name and stale and node.idx not in lent:
                out.append((node, vc, sim.vcs[node.home]))
                left -= 1
    return out


class ReactiveQuota:
    """Borrow for jobs that wait now, return what stays idle (see module doc)."""

    name = "reactive"

    def step(self, sim: Simulator, now: float) -> Moves:
        need = {}
        for vc in sim.vcs.values():
            if vc.pending:
                n = need_nodes(vc) - vc.have_nodes
                if n > 0:
                    need[vc.name] = n
        offer = {vc.name: lendable(vc) for vc in sim.vcs.values() if not vc.pending}
        return send_home(sim, now, match(sim, need, offer))


Forecast = Callable[["Simulator", float], dict[str, tuple[float, float, float]]]


class PlannerQuota:
    """Planner-driven quotas from a forecast function ``(sim, now) -> {vc: (p50, p90,
    hold)}``: p50 and p90 of demand over the lead, ``hold`` over the lend horizon."""

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
            p50, p90, hold = forecasts[vc.name]
            tenants.append(
                TenantState(
                    vc.name,
                    quota_gpus=vc.quota_gpus,
                    guaranteed_gpus=vc.guaranteed_nodes * g,
                    idle_gpus=len(vc.idle_nodes()) * g,
                    p50=p50,
                    p90=p90,
                    horizon_s=sim.s.lead_s,
                    need_gpus=float(need_gpus(vc)),
                    hold_gpus=hold,
                    nominal_gpus=vc.static_nodes * g,
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
                freed.extend((node, vc) for node in lend_order(vc)[: -d.delta_gpus // g])
        moves: Moves = []
        for d in plan.moves:
            for _ in range(d.delta_gpus // g if d.delta_gpus > 0 else 0):
                # a node of the receiver's own first: it comes home rather than away
                k = next((i for i, (n, _) in enumerate(freed) if n.home == d.tenant), 0)
                node, src = freed.pop(k)
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
    model: Any,
    horizons: tuple[float, ...],
    flow: SimFlow | None = None,
    *,
    hold_s: float = 0.0,
) -> Forecast:
    """Feed the model this tick's window of each VC, then forecast: the largest p50 and p90
    over ``horizons`` (the quota must cover demand until the next plan and at the lead),
    and, as ``hold``, the largest p90 up to ``hold_s`` (0: none). The windows carry the job
    flow (``flow``, a fresh :class:`SimFlow` by default)."""
    tracker = flow or SimFlow()
    asked = sorted({*horizons, *([hold_s] if hold_s > 0 else [])})

    def forecast(sim: Simulator, now: float) -> dict[str, tuple[float, float, float]]:
        tracker.advance(sim, now)
        for vc in sim.vcs.values():
            model.learn_one(window_of(sim, vc, now, tracker))
        result = {}
        for name in sim.vcs:
            out = model.forecast(name, asked)
            lead = [out[h] for h in horizons]
            hold = max(v[1] for h, v in out.items() if h <= hold_s) if hold_s > 0 else 0.0
            result[name] = (max(v[0] for v in lead), max(v[1] for v in lead), hold)
        return result

    return forecast


KNOWS = frozenset({"arrivals", "departures"})


class OracleDemand:
    """True peak demand of each VC over ``(now, now + horizon]``: what is waiting now, what
    runs and will still run, and the jobs that will arrive and still run (from the trace);
    as ``hold``, the same peak over ``hold_s`` (0: none).

    ``knows`` says which part of the future it is told (both by default): ``"arrivals"``,
    the jobs that will be submitted (when, how many GPUs, how long they run); without it
    no future job is counted and the peak is the demand now. ``"departures"``, when each
    job running now ends; without it they all run past the horizon.
    ``benchmarks/oracle_information.py`` uses the parts to measure what each is worth to
    the planner.

    Example: VC ``a`` runs an 8-GPU job that ends at 60 s; another arrives at 100 s.
    Told everything, the peak over 600 s is 8 GPUs; told only the arrival, 16:

    >>> from dprobe.sim.jobs import SimJob
    >>> from types import SimpleNamespace as Now
    >>> jobs = [SimJob(1, "a", gpus=8, submit_s=100.0, duration_s=50.0)]
    >>> running = Now(gpus=8, remaining_s=60.0, speed=1.0, last_s=0.0)
    >>> vc = Now(name="a", pending_gpus=0, running_gpus=8, running=[running])
    >>> [OracleDemand(jobs, 600.0, knows=k)._peaks(vc, 0.0)[0]
    ...  for k in (KNOWS, {"arrivals"}, {"departures"}, set())]
    [8.0, 16.0, 8.0, 8.0]
    """

    def __init__(
        self,
        jobs: list[SimJob],
        horizon_s: float,
        hold_s: float = 0.0,
        *,
        knows: Collection[str] = KNOWS,
    ) -> None:
        if unknown := set(knows) - KNOWS:
            raise ValueError(f"an oracle knows only {sorted(KNOWS)}, not {sorted(unknown)}")
        self.horizon_s = horizon_s
        self.hold_s = hold_s
        self.arrivals = "arrivals" in knows
        self.departures = "departures" in knows
        self._future: dict[str, list[SimJob]] = {}
        for j in jobs:
            self._future.setdefault(j.tenant, []).append(j)
        self._next: dict[str, int] = dict.fromkeys(self._future, 0)

    def __call__(self, sim: Simulator, now: float) -> dict[str, tuple[float, float, float]]:
        out = {}
        for vc in sim.vcs.values():
            p, hold = self._peaks(vc, now)
            out[vc.name] = (p, p, hold)
        return out

    def _peaks(self, vc: VC, now: float) -> tuple[float, float]:
        """Peak demand over the horizon and over the hold (0 when off), in one scan of
        the arrivals up to the longer of the two."""
        fut = self._future.get(vc.name, []) if self.arrivals else []
        i = self._next.get(vc.name, 0)
        while i < len(fut) and fut[i].submit_s <= now:
            i += 1
        self._next[vc.name] = i
        peak = hold = float(vc.pending_gpus + vc.running_gpus)
        end_t, hold_t = now + self.horizon_s, now + self.hold_s
        running = [(self._end_of(j, now), j.gpus) for j in vc.running]
        k = i
        arrived: list[tuple[float, int]] = []
        while k < len(fut) and fut[k].submit_s <= max(end_t, hold_t):
            tau = fut[k].submit_s
            arrived.append((tau + fut[k].duration_s, fut[k].gpus))
            still = sum(g for e, g in running if e > tau)
            new = sum(g for e, g in arrived if e > tau)
            demand = float(vc.pending_gpus + still + new)
            if tau <= end_t:
                peak = max(peak, demand)
            if tau <= hold_t:
                hold = max(hold, demand)
            k += 1
        return peak, (hold if self.hold_s > 0 else 0.0)

    def _end_of(self, job: SimJob, now: float) -> float:
        """When running ``job`` ends, as far as this oracle is told (never, without
        ``"departures"``)."""
        if not self.departures:
            return math.inf
        return now + job.remaining_s / job.speed - (now - job.last_s)
