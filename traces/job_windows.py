"""Per-tenant windows of a job trace (``jobs-csv``): demand and job flow, for ``dprobe evaluate``.

Reading (an **assumption**, the same as :mod:`dprobe.traces.replay_jobs`): a job trace
says when each job was submitted and how long it ran, not when a scheduler started it.
Without a scheduler nothing is known to wait, so every job runs from its submit time for
its duration: a tenant's demand is the GPUs of its jobs submitted and not yet finished,
all of it running (``pending_gpus`` = 0; to see queueing under a finite cluster, use
``dprobe simulate``). ``running_gpus`` (and ``gpus_busy``) is the time average over the
window, like the mean demand of the other trace formats; the window's ``flow``
(:mod:`dprobe.models.job_flow`) holds the jobs running at its end by age, and the jobs
submitted, started and finished in it, with the run time of those that finished. A
tenant gets a window while it has a job running or an event in it.

Example:
    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> jobs = [JobRecord("1", "a", 8, 0.0, 900.0, "vgg16", 2),
    ...         JobRecord("2", "a", 4, 300.0, 60.0, "", 3)]
    >>> ws = list(job_windows(jobs, 600.0))
    >>> [(w.window_start, w.running_gpus, w.flow.submitted_jobs, w.flow.finished_jobs)
    ...  for w in ws]
    [(0.0, 8.4, 2, 1), (600.0, 4.0, 0, 1)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from dprobe.models.job_flow import (
    ActiveJob,
    FlowEvent,
    FlowSettings,
    job_flow,
    pending_effective_gpus,
)
from dprobe.models.levels import LevelSettings
from dprobe.schema import LevelCounts, TenantWindow
from dprobe.traces.jobs_csv import JobRecord
from dprobe.traces.replay_jobs import job_events


@dataclass
class _Tenant:
    active: dict[str, ActiveJob] = field(default_factory=dict)
    events: list[FlowEvent] = field(default_factory=list)
    running: float = 0.0
    gpu_s: float = 0.0
    last_t: float = 0.0

    def advance(self, t: float) -> None:
        self.gpu_s += self.running * (t - self.last_t)
        self.last_t = t


def job_windows(
    jobs: Iterable[JobRecord],
    window_s: float,
    *,
    flow: FlowSettings | None = None,
    levels: LevelSettings | None = None,
) -> Iterator[TenantWindow]:
    """Closed windows of ``window_s`` seconds, in time order (see the module doc)."""
    if not window_s > 0:
        raise ValueError("window_s must be > 0")
    fs = flow or FlowSettings()
    lv = levels or LevelSettings()
    tenants: dict[str, _Tenant] = {}
    k: int | None = None
    for ev in job_events(jobs):
        kb = math.floor(ev.ts / window_s)
        if k is None:
            k = kb
        while k < kb:
            yield from _close(tenants, k, window_s, fs, lv)
            busy = any(t.active for t in tenants.values())
            k = k + 1 if busy else kb
        t = tenants.setdefault(ev.tenant, _Tenant(last_t=ev.ts))
        t.advance(ev.ts)
        if ev.event == "submit":
            t.active[ev.job] = ActiveJob(float(ev.gpus), ev.ts)
            t.events.append(FlowEvent("submit", float(ev.gpus)))
        elif ev.event == "start":
            t.active[ev.job] = ActiveJob(float(ev.gpus), t.active[ev.job].submit_ts, ev.ts)
            t.running += ev.gpus
            t.events.append(FlowEvent("start", float(ev.gpus)))
        else:
            job = t.active.pop(ev.job)
            t.running -= ev.gpus
            run_s = ev.ts - job.start_ts if job.start_ts is not None else None
            t.events.append(FlowEvent("finish", float(ev.gpus), run_s))
    while k is not None and any(t.active or t.events for t in tenants.values()):
        yield from _close(tenants, k, window_s, fs, lv)
        k += 1


def _close(
    tenants: dict[str, _Tenant], k: int, window_s: float, fs: FlowSettings, lv: LevelSettings
) -> Iterator[TenantWindow]:
    start, end = k * window_s, (k + 1) * window_s
    for name in sorted(tenants):
        t = tenants[name]
        if not (t.active or t.events):
            t.gpu_s, t.last_t = 0.0, end
            continue
        t.advance(end)
        active = list(t.active.values())
        running = t.gpu_s / window_s
        pending = sum(j.gpus for j in active if j.start_ts is None)
        yield TenantWindow(
            tenant=name,
            window_start=float(start),
            window_end=float(end),
            hosts=0,
            gpus_busy=running,
            instances=0.0,
            util_sum=0.0,
            level_counts=LevelCounts(),
            effective_demand_gpus=running + pending_effective_gpus(active, lv, fs.unknown_level),
            pending_gpus=float(pending),
            running_gpus=running,
            flow=job_flow(active, t.events, end=end, settings=fs),
        )
        t.events = []
        t.gpu_s = 0.0
