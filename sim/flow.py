"""The job flow of the simulator's VC windows, as the stream worker reports it live.

At every planning tick :meth:`SimFlow.advance` notes the jobs submitted since the last
tick; :meth:`SimFlow.window` then gives a VC's :class:`~dprobe.schema.JobFlow` for the
window ``(last tick, now]`` (the state at the tick, after the tick's own events) and its
pending GPUs weighted by the level the job profiler predicts from each job's model name
(:func:`~dprobe.models.job_flow.pending_effective_gpus`). Only jobs queued or running at
the last tick and those submitted since are looked at, so a tick costs what is active,
not the whole trace.

Example:
    >>> from dprobe.sim.engine import Simulator
    >>> from dprobe.sim.jobs import SimJob
    >>> from dprobe.sim.policies import make_policy
    >>> jobs = [SimJob(0, "a", gpus=8, submit_s=5.0, duration_s=100.0, model="vgg16"),
    ...         SimJob(1, "a", gpus=8, submit_s=10.0, duration_s=50.0, model="vgg16")]
    >>> sim = Simulator(jobs, {"a": 1}, make_policy("fifo")).run()
    >>> flow = SimFlow()
    >>> flow.advance(sim, 200.0)
    >>> f, _ = flow.window(sim, sim.vcs["a"], 200.0, start=0.0)
    >>> f.submitted_jobs, f.started_jobs, f.finished_jobs, f.finished_gpus
    (2, 2, 2, 16.0)
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from dprobe.models.demand import default_profiler
from dprobe.models.job_flow import (
    ActiveJob,
    FlowEvent,
    FlowSettings,
    job_flow,
    pending_effective_gpus,
)
from dprobe.models.levels import Level, LevelSettings
from dprobe.schema import JobFlow

if TYPE_CHECKING:
    from dprobe.sim.cluster import VC
    from dprobe.sim.engine import Simulator
    from dprobe.sim.jobs import SimJob


class SimFlow:
    """Per-VC job flow between planning ticks (see the module doc)."""

    def __init__(
        self, settings: FlowSettings | None = None, levels: LevelSettings | None = None
    ) -> None:
        self.settings = settings or FlowSettings()
        self.levels = levels or LevelSettings()
        profiler = default_profiler(self.levels)

        @cache
        def level_of(model: str) -> Level | None:
            if not model:
                return None
            est = profiler.estimate(family=model)
            return None if est.source == "fallback" else est.level

        self.level_of = level_of
        self._next = 0
        self._watch: dict[str, set[SimJob]] = {}

    def advance(self, sim: Simulator, now: float) -> None:
        """Take in the jobs submitted up to ``now`` (call once per tick, times increasing)."""
        jobs = sim.jobs
        while self._next < len(jobs) and jobs[self._next].submit_s <= now:
            job = jobs[self._next]
            self._watch.setdefault(job.tenant, set()).add(job)
            self._next += 1

    def window(self, sim: Simulator, vc: VC, now: float, *, start: float) -> tuple[JobFlow, float]:
        """``(flow, pending effective GPUs)`` of ``vc`` for the window ``(start, now]``."""
        watch = self._watch.setdefault(vc.name, set())
        watch.update(vc.running)
        watch.update(j for _, j in vc.pending)
        active: list[ActiveJob] = []
        events: list[FlowEvent] = []
        for job in sorted(watch, key=lambda j: j.idx):
            if start < job.submit_s <= now:
                events.append(FlowEvent("submit", float(job.gpus)))
            if job.start_s is not None and start < job.start_s <= now:
                events.append(FlowEvent("start", float(job.gpus)))
            if job.end_s is not None and start < job.end_s <= now:
                run_s = job.end_s - job.start_s if job.start_s is not None else None
                events.append(FlowEvent("finish", float(job.gpus), run_s))
            if job.state == "running":
                active.append(ActiveJob(float(job.gpus), job.submit_s, job.start_s, None))
            elif job.state == "waiting":
                level = self.level_of(job.model)
                active.append(ActiveJob(float(job.gpus), job.submit_s, None, level))
        watch.difference_update([j for j in watch if j.state == "done"])
        flow = job_flow(active, events, end=now, settings=self.settings)
        weighted = pending_effective_gpus(active, self.levels, self.settings.unknown_level)
        return flow, weighted
