"""The oracle's own rule: the reactive lender, told which jobs will arrive.

:class:`ForesightQuota` does what :class:`~dprobe.sim.quota.ReactiveQuota` does at every
planning tick, with one difference: a VC's need counts the jobs that will be submitted to
it within the lead (one move latency plus one planning interval: the latest a node moved
now can still be there for them) as if they waited already. So a VC borrows, or gets its
lent nodes back, one lead before a burst instead of after it, and a VC lends (or sends
home) only nodes that none of its jobs arriving within the lead would need. It knows the
future jobs' sizes and arrival times; it counts a busy node as busy for the whole lead.
(Keeping nodes for the arrivals of a longer lend horizon, ``SimSettings.hold_s``, was
tried on validation streams with ``--reclaim preempt``: summed over an hour without
departures, that demand kept so many nodes home that borrowers waited longer than under
the reactive rule.)

This is what foresight is worth to the rule a platform runs without dprobe; the oracle
cell keeps the better of this run, the quota planner fed the true future demand, and the
reactive run (``run.py``).

Example: a job of 16 GPUs arrives at 900 s on VC ``a`` (one 8-GPU node); ``b`` (two
nodes) runs a small job from 0 s and has one node to lend. With a 300 s move latency, the
reactive rule borrows at the 900 s tick, once the job waits (it starts at 1,200 s); the
oracle borrows at the 300 s tick, when the job is one lead (600 s) away, and the job
starts on arrival:

    >>> from dprobe.sim.engine import Simulator
    >>> from dprobe.sim.jobs import SimJob
    >>> from dprobe.sim.policies import make_policy
    >>> from dprobe.sim.quota import ReactiveQuota
    >>> from dprobe.sim.settings import SimSettings
    >>> def start(quota_of):
    ...     jobs = [SimJob(0, "b", gpus=1, submit_s=0.0, duration_s=3000.0),
    ...             SimJob(1, "a", gpus=16, submit_s=900.0, duration_s=900.0)]
    ...     s = SimSettings(move_latency_s=300.0)
    ...     Simulator(jobs, {"a": 1, "b": 2}, make_policy("fifo"), quota_of(jobs),
    ...               settings=s).run()
    ...     return jobs[1].start_s
    >>> start(lambda jobs: ReactiveQuota()), start(lambda jobs: ForesightQuota(jobs))
    (1200.0, 900.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dprobe.sim.placement import need_nodes
from dprobe.sim.quota import Moves, lendable, match, send_home

if TYPE_CHECKING:
    from dprobe.sim.engine import Simulator
    from dprobe.sim.jobs import SimJob


class ForesightQuota:
    """The reactive rule with each VC's future submissions known (see module doc)."""

    name = "foresight"

    def __init__(self, jobs: Sequence[SimJob]) -> None:
        self._arrivals: dict[str, list[tuple[float, int]]] = {}
        for j in sorted(jobs, key=lambda j: j.submit_s):
            self._arrivals.setdefault(j.tenant, []).append((j.submit_s, j.gpus))
        self._next: dict[str, int] = dict.fromkeys(self._arrivals, 0)

    def coming(self, vc: str, now: float, until: float) -> list[int]:
        """GPUs of each job submitted to ``vc`` in ``(now, until]``."""
        arrivals = self._arrivals.get(vc, [])
        i = self._next.get(vc, 0)
        while i < len(arrivals) and arrivals[i][0] <= now:
            i += 1
        self._next[vc] = i
        out = []
        while i < len(arrivals) and arrivals[i][0] <= until:
            out.append(arrivals[i][1])
            i += 1
        return out

    def step(self, sim: Simulator, now: float) -> Moves:
        lead = sim.s.lead_s
        need: dict[str, int] = {}
        room: dict[str, int] = {}
        for vc in sim.vcs.values():
            short = need_nodes(vc, self.coming(vc.name, now, now + lead)) - vc.have_nodes
            if short > 0:
                need[vc.name] = short
            elif short < 0 and not vc.pending:
                room[vc.name] = -short  # what neither its queue nor its arrivals need
        offer = {name: lendable(sim.vcs[name])[:spare] for name, spare in room.items()}
        moves = match(sim, need, offer)
        for _, src, _ in moves:
            room[src.name] -= 1
        return send_home(sim, now, moves, room)
