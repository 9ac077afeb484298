"""Event-driven cluster simulator: a heap of events, VCs owning 8-GPU nodes, one policy.

Events at one instant are handled in this order: completions, LAS demotions, nodes that
land after a move, arrivals, then each touched VC schedules its queue once, then the quota
step (a planning tick) sees that state and moves idle nodes; VCs that received nodes
schedule again.

Reconfiguration costs the same in every mode: a node that changes VC serves nobody for
``move_latency_s``. A VC's own (static) nodes are always returnable: when its waiting jobs
need more nodes than it holds and some of its own are lent out, it recalls them at once;
the borrower either lets the jobs on them finish (``reclaim="wait"``, it starts nothing
new there) or preempts them (``"preempt"``: each loses its work since its last checkpoint
and waits again); the node then moves home, with the latency.

Scheduling a VC: walk its waiting jobs in policy order and start every job that fits
now (a job that does not fit is skipped, no reservation: greedy backfilling, as the
Helios and Tiresias simulators do). Preemptive policies then let the first waiting job
that can make room stop lower-ranked running jobs, and walk again.

Example:
    >>> from dprobe.sim.jobs import SimJob
    >>> from dprobe.sim.policies import make_policy
    >>> jobs = [SimJob(0, "a", gpus=8, submit_s=0.0, duration_s=100.0),
    ...         SimJob(1, "a", gpus=8, submit_s=10.0, duration_s=50.0)]
    >>> r = Simulator(jobs, {"a": 1}, make_policy("fifo")).run()
    >>> [(j.start_s, j.end_s) for j in jobs]
    [(0.0, 100.0), (100.0, 150.0)]
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any, Protocol

from dprobe.sim.cluster import VC, Node, Slot
from dprobe.sim.jobs import SimJob
from dprobe.sim.placement import need_nodes
from dprobe.sim.policies import Policy
from dprobe.sim.settings import SimSettings

if TYPE_CHECKING:
    from dprobe.sim.sharing import Sharing

Move = tuple[Node, VC, VC]

FINISH, DEMOTE, LAND, ARRIVAL, TICK = 0, 1, 2, 3, 4


class QuotaMode(Protocol):
    """Moves idle nodes between VCs at every planning tick."""

    name: str

    def step(self, sim: Simulator, now: float) -> list[Move]: ...


class StaticQuota:
    """Quotas never change."""

    name = "static"

    def step(self, sim: Simulator, now: float) -> list[Move]:
        return []


class Simulator:
    """One run of ``jobs`` (sorted by submit time; mutated) on VCs of ``vc_nodes`` nodes."""

    def __init__(
        self,
        jobs: list[SimJob],
        vc_nodes: dict[str, int],
        policy: Policy,
        quota: QuotaMode | None = None,
        *,
        settings: SimSettings | None = None,
        sharing: Sharing | None = None,
    ) -> None:
        self.s = settings or SimSettings()
        self.jobs = jobs
        self.policy = policy
        self.quota = quota or StaticQuota()
        self.sharing = sharing
        g = self.s.node_gpus
        self.vcs: dict[str, VC] = {}
        idx = 0
        self.home: dict[str, list[Node]] = {}
        t0 = jobs[0].submit_s if jobs else 0.0
        for name in sorted(vc_nodes):
            vc = self.vcs[name] = VC(name, g)
            vc.static_nodes = vc_nodes[name]
            vc.guaranteed_nodes = math.floor(vc_nodes[name] * self.s.guarantee_fraction)
            self.home[name] = []
            for _ in range(vc_nodes[name]):
                node = Node(idx, g)
                node.home = name
                node.idle_since = t0
                vc.add_node(node)
                self.home[name].append(node)
                idx += 1
        unknown = sorted({j.tenant for j in jobs} - set(self.vcs))
        if unknown:
            raise ValueError(f"jobs of tenants without a VC: {', '.join(unknown[:5])}")
        self.capacity_gpus = idx * g
        self.now = 0.0
        self.next_arrival = 0
        self._heap: list[tuple[float, int, int, Any, int]] = []
        self._seq = 0
        self._dirty: set[VC] = set()
        self._alloc = 0
        self._alloc_area = 0.0
        self._alloc_last = 0.0
        self.node_moves = 0
        self.policy_preemptions = 0  # by the scheduling policy (SRTF, LAS): no work lost
        self.preemptions = 0  # to reclaim a lent node: work since the last checkpoint lost
        self.lost_gpu_s = 0.0
        self.in_flight_gpu_s = 0.0
        self.done = 0

    # --- event plumbing --------------------------------------------------------
    def _push(self, t: float, kind: int, obj: Any = None, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, obj, version))

    def _set_alloc(self, delta: int) -> None:
        self._alloc_area += self._alloc * (self.now - self._alloc_last)
        self._alloc_last = self.now
        self._alloc += delta

    def run(self) -> Simulator:
        """Run until every job has finished (or nothing can ever change); returns self."""
        jobs, n = self.jobs, len(self.jobs)
        ticking = self.quota.name != "static"
        if jobs and ticking:
            self._push(jobs[0].submit_s + self.s.interval_s, TICK)
        if jobs:
            self.now = self._alloc_last = jobs[0].submit_s
        idle_ticks = 0
        while True:
            t_arr = jobs[self.next_arrival].submit_s if self.next_arrival < n else math.inf
            top = self._heap[0] if self._heap else None
            t_next = min(t_arr, top[0] if top else math.inf)
            if self._dirty and (t_next > self.now or (top and top[1] == TICK and t_arr > self.now)):
                self._schedule_dirty()
                continue
            if t_next == math.inf:
                break
            self.now = t_next
            if top is not None and (top[0], top[1]) <= (t_arr, ARRIVAL):
                heapq.heappop(self._heap)
                _, kind, _, obj, version = top
                if kind == FINISH and obj.version == version:
                    self._finish(obj)
                elif kind == DEMOTE and obj.version == version:
                    self.progress(obj)
                    obj.queue = 1
                    self._dirty.add(self.vcs[obj.tenant])
                elif kind == LAND:
                    self._land(obj, self.vcs[obj.owner])
                elif kind == TICK:
                    moved = self._tick()
                    waiting = any(vc.pending for vc in self.vcs.values())
                    running = any(vc.running for vc in self.vcs.values())
                    stuck = waiting and not running and not moved and self.next_arrival >= n
                    idle_ticks = idle_ticks + 1 if stuck else 0
                    if (self.next_arrival < n or waiting or running) and idle_ticks < 3:
                        self._push(self.now + self.s.interval_s, TICK)
            else:
                job = jobs[self.next_arrival]
                self.next_arrival += 1
                self._arrive(job)
        self._set_alloc(0)
        return self

    # --- job lifecycle ---------------------------------------------------------
    def _arrive(self, job: SimJob) -> None:
        vc = self.vcs[job.tenant]
        self.policy.on_submit(job)
        job.key = self.policy.key(job, self.now)
        vc.enqueue(job.key, job)
        vc.pending_gpus += job.gpus
        job.away_mark = vc.away_clock(self.now)
        self._dirty.add(vc)

    def progress(self, job: SimJob) -> None:
        """Account ``job``'s work and attained service up to now."""
        dt = self.now - job.last_s
        if dt > 0:
            job.remaining_s = max(0.0, job.remaining_s - dt * job.speed)
            job.attained_gpu_s += dt * job.gpus
        job.last_s = self.now

    def start(self, job: SimJob, vc: VC, slot: Slot) -> None:
        """Start (or resume) ``job`` on ``slot`` of ``vc``; it must be out of ``vc.pending``."""
        vc.allocate(job, slot)
        job.placement = slot
        job.state = "running"
        job.waited_s += self.now - job.last_s
        job.guarantee_wait_s += vc.away_clock(self.now) - job.away_mark
        job.last_s = self.now
        job.resume_remaining_s = job.remaining_s
        if job.start_s is None:
            job.start_s = self.now
        vc.running.add(job)
        vc.running_gpus += job.gpus
        vc.pending_gpus -= job.gpus
        self._set_alloc(sum(g for _, g in slot))
        self.reschedule(job)

    def reschedule(self, job: SimJob) -> None:
        """(Re)plan ``job``'s completion from its remaining work and current speed."""
        job.version += 1
        self._push(self.now + job.remaining_s / job.speed, FINISH, job, job.version)
        after = self.policy.demote_after_s(job)
        if after is not None:
            self._push(self.now + after, DEMOTE, job, job.version)

    def _stop(self, job: SimJob, vc: VC) -> None:
        self.progress(job)
        if self.sharing is not None:
            self.sharing.on_stop(self, job)
        vc.release(job, job.placement)
        self._set_alloc(-sum(g for _, g in job.placement))
        for node, _ in job.placement:
            if not node.jobs:
                node.idle_since = self.now
                if node.draining:  # recalled: it goes home now that it is idle
                    home = self.vcs[node.home]
                    home.recalling -= 1
                    self.move(node, vc, home)
        job.placement = []
        vc.running.discard(job)
        vc.running_gpus -= job.gpus
        job.version += 1

    def _finish(self, job: SimJob) -> None:
        vc = self.vcs[job.tenant]
        self._stop(job, vc)
        job.state = "done"
        job.end_s = self.now
        job.remaining_s = 0.0
        self.done += 1
        self.policy.on_finish(job)
        self._dirty.add(vc)

    def _preempt(self, job: SimJob, vc: VC, *, lost_s: float | None = None) -> None:
        """Stop ``job`` and queue it again. The policy's own preemptions lose
        ``preempt_overhead_s``; a reclaim loses ``lost_s`` (its work since the checkpoint)."""
        self._stop(job, vc)
        job.state = "waiting"
        if lost_s is None:
            job.remaining_s += self.s.preempt_overhead_s
            self.policy_preemptions += 1
        else:
            job.remaining_s += lost_s
            self.lost_gpu_s += lost_s * job.gpus
            self.preemptions += 1
        job.key = self.policy.key(job, self.now)
        vc.enqueue(job.key, job)
        vc.pending_gpus += job.gpus
        job.away_mark = vc.away_clock(self.now)

    def since_checkpoint(self, job: SimJob) -> float:
        """Work ``job`` has done since its last checkpoint (it checkpoints every
        ``checkpoint_interval_s`` of work after each (re)start); its progress must be current."""
        done = max(0.0, job.resume_remaining_s - job.remaining_s)
        every = self.s.checkpoint_interval_s
        return math.fmod(done, every) if every > 0 else 0.0

    # --- scheduling ------------------------------------------------------------
    def _schedule_dirty(self) -> None:
        dirty, self._dirty = sorted(self._dirty, key=lambda v: v.name), set()
        for vc in dirty:
            self._fill(vc)
            while self.policy.preemptive and self._preempt_once(vc):
                self._fill(vc)
            if vc.pending and vc.away:
                self._reclaim(vc)

    def _fill(self, vc: VC) -> None:
        """Start every waiting job that fits now, in policy order."""
        pend = vc.pending
        if not pend:
            return
        free = vc.free_gpus
        share = self.sharing
        if free == 0 and share is None:
            return
        min_fail = math.inf
        started: list[int] = []
        for i, (_, job) in enumerate(pend):
            g = job.gpus
            can_share = share is not None and share.can_share(job)
            if g >= min_fail and not can_share:
                continue
            slot = vc.find_slot(g) if free >= g else None
            if slot is not None:
                self.start(job, vc, slot)
                started.append(i)
                free -= sum(n for _, n in slot)
                if share is not None:
                    share.on_start_alone(self, job)
            elif can_share and share is not None and share.try_colocate(self, vc, job):
                started.append(i)
            else:
                min_fail = min(min_fail, g)
                if min_fail <= 1 and share is None:
                    break
        for i in reversed(started):
            del pend[i]

    def _preempt_once(self, vc: VC) -> bool:
        """Let the first waiting job that can stop lower-ranked running jobs do so."""
        if not vc.running or not vc.pending:
            return False
        now = self.now

        def rank(j: SimJob) -> tuple[float, ...]:
            return self.policy.key(j, now)

        worst = max(rank(j) for j in vc.running)
        min_fail = math.inf
        for i, (key, job) in enumerate(vc.pending):
            if key >= worst:
                return False
            if job.gpus >= min_fail:
                continue
            victims = vc.find_victims(job.gpus, rank, key)
            if not victims:
                min_fail = job.gpus
                continue
            for v in victims:
                self._preempt(v, vc)
            slot = vc.find_slot(job.gpus)
            if slot is None:  # a multi-node victim freed less than counted; try later
                return True
            del vc.pending[vc.pending.index((key, job), i)]
            self.start(job, vc, slot)
            return True
        return False

    # --- quota -----------------------------------------------------------------
    def _tick(self) -> bool:
        moves = self.quota.step(self, self.now)
        for node, src, dst in moves:
            self.move(node, src, dst)
        return bool(moves)

    def move(self, node: Node, src: VC, dst: VC) -> None:
        """Move idle ``node`` from ``src`` to ``dst``; it serves ``dst`` after the move latency."""
        src.remove_node(node)
        if node.home == src.name:
            src.set_away(+1, self.now)
        self.node_moves += 1
        latency = self.s.move_latency_s
        if latency <= 0:
            self._land(node, dst)
            return
        node.owner = dst.name
        dst.in_flight[node.idx] = node
        self.in_flight_gpu_s += node.gpus * latency
        self._push(self.now + latency, LAND, node)

    def _land(self, node: Node, vc: VC) -> None:
        vc.in_flight.pop(node.idx, None)
        vc.add_node(node)
        node.idle_since = self.now
        if node.home == vc.name:
            vc.set_away(-1, self.now)
        self._dirty.add(vc)
        home = self.vcs[node.home]
        if home.pending and home.away:  # it may be wanted back at once
            self._dirty.add(home)

    def _reclaim(self, vc: VC) -> None:
        """``vc``'s waiting jobs need more nodes than it has or has coming: recall its own
        lent nodes (idle ones first, then the least busy), up to the shortfall."""
        short = need_nodes(vc) - vc.have_nodes
        if short <= 0:
            return
        lent = [
            n
            for n in self.home[vc.name]
            if n.owner
            and n.owner != vc.name
            and not n.draining
            and n.idx in self.vcs[n.owner].nodes
        ]
        lent.sort(key=lambda n: (n.gpus - n.free, n.idx))
        for node in lent[:short]:
            borrower = self.vcs[node.owner]
            if not node.jobs:
                self.move(node, borrower, vc)
                continue
            borrower.drain(node)
            vc.recalling += 1
            if self.s.reclaim == "preempt":
                for job in sorted(node.jobs, key=lambda j: j.idx):
                    if job.state == "running":
                        self.progress(job)
                        self._preempt(job, borrower, lost_s=self.since_checkpoint(job))
            self._dirty.add(borrower)

    # --- results ---------------------------------------------------------------
    @property
    def alloc_gpu_s(self) -> float:
        """GPU-seconds allocated to jobs so far."""
        return self._alloc_area
