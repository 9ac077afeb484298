"""A tenant's job flow in one window: the ``flow`` part of a TenantWindow, from plain data.

The same function builds it for the stream worker (from its job book), for a jobs trace
(``dprobe evaluate --format jobs-csv``) and for the simulator, so a forecaster sees the
same thing live, replayed and simulated. Inputs:

- the jobs that are queued or running at the window's end (:class:`ActiveJob`: GPUs,
  submit time, start time if started, the profiler's predicted level if known);
- what happened in the window (:class:`FlowEvent`: a job submitted, started, finished).

Buckets are log-spaced time ranges ``[0, e0), [e0, e1), ..., [e_last, inf)`` over
``FlowSettings.edges_s`` (default 1 min to 2.8 days, each edge four times the last: an
assumption, a setting), so a flow has a fixed size whatever the number of jobs. A queued
job without a predicted level counts at ``unknown_level`` (default ``EX``, a whole GPU
per requested GPU: the safe choice for quota, an assumption).

Example:
    >>> jobs = [ActiveJob(gpus=8, submit_ts=0.0, start_ts=30.0),
    ...         ActiveJob(gpus=4, submit_ts=50.0, level="L1")]
    >>> events = [FlowEvent("submit", 4), FlowEvent("finish", 2, run_s=100.0)]
    >>> f = job_flow(jobs, events, end=60.0, settings=FlowSettings(edges_s=(60.0, 600.0)))
    >>> f.running_by_age, f.pending_by_level.L1, f.pending_by_wait, f.finished_by_duration
    ((8.0, 0.0, 0.0), 4.0, (4.0, 0.0, 0.0), (0, 1, 0))
    >>> pending_effective_gpus(jobs, LevelSettings())  # 4 GPUs at L1's weight 0.3
    1.2
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from dprobe.models.levels import LEVELS, Level, LevelSettings
from dprobe.schema import MAX_FLOW_EDGES, JobFlow, LevelGpus

DEFAULT_EDGES_S: tuple[float, ...] = (60.0, 240.0, 960.0, 3840.0, 15360.0, 61440.0, 245760.0)
FlowKind = Literal["submit", "start", "finish"]


def log_edges(first_s: float, factor: float, count: int) -> tuple[float, ...]:
    """``count`` log-spaced edges: ``first_s * factor**k``.

    >>> log_edges(60.0, 4.0, 3)
    (60.0, 240.0, 960.0)
    """
    return tuple(float(first_s * factor**k) for k in range(count))


@dataclass(frozen=True)
class FlowSettings:
    """Bucket edges (seconds, increasing) and the level of a queued job never levelled."""

    edges_s: tuple[float, ...] = DEFAULT_EDGES_S
    unknown_level: Level = "EX"

    def __post_init__(self) -> None:
        e = self.edges_s
        if not 1 <= len(e) <= MAX_FLOW_EDGES:
            raise ValueError(f"flow edges: between 1 and {MAX_FLOW_EDGES} edges, got {len(e)}")
        if e[0] <= 0 or any(b <= a for a, b in itertools.pairwise(e)):
            raise ValueError("flow edges must be > 0 and increasing")
        if self.unknown_level not in LEVELS:
            raise ValueError(f"unknown_level must be one of {', '.join(LEVELS)}")


@dataclass(frozen=True, slots=True)
class ActiveJob:
    """A job queued (``start_ts`` None) or running at some moment."""

    gpus: float
    submit_ts: float
    start_ts: float | None = None
    level: Level | None = None


@dataclass(frozen=True, slots=True)
class FlowEvent:
    """One job event inside the window; ``run_s``: run time of a job that finished."""

    kind: FlowKind
    gpus: float
    run_s: float | None = None


def bucket_of(value_s: float, edges_s: tuple[float, ...]) -> int:
    """Index of the bucket holding ``value_s``: ``bucket_of(60, (60, 600)) -> 1``."""
    return bisect.bisect_right(edges_s, value_s)


def job_flow(
    active: Iterable[ActiveJob],
    events: Iterable[FlowEvent],
    *,
    end: float,
    settings: FlowSettings | None = None,
) -> JobFlow:
    """The JobFlow of a window ending at ``end`` (see the module doc)."""
    s = settings or FlowSettings()
    n = len(s.edges_s) + 1
    running = [0.0] * n
    waiting = [0.0] * n
    by_level = dict.fromkeys(LEVELS, 0.0)
    for job in active:
        if job.start_ts is not None:
            running[bucket_of(max(0.0, end - job.start_ts), s.edges_s)] += job.gpus
        else:
            waiting[bucket_of(max(0.0, end - job.submit_ts), s.edges_s)] += job.gpus
            by_level[job.level or s.unknown_level] += job.gpus
    jobs = dict.fromkeys(("submit", "start", "finish"), 0)
    gpus = dict.fromkeys(("submit", "start", "finish"), 0.0)
    durations = [0] * n
    for ev in events:
        jobs[ev.kind] += 1
        gpus[ev.kind] += ev.gpus
        if ev.kind == "finish" and ev.run_s is not None:
            durations[bucket_of(max(0.0, ev.run_s), s.edges_s)] += 1
    return JobFlow(
        edges_s=tuple(s.edges_s),
        running_by_age=tuple(running),
        pending_by_level=LevelGpus(**by_level),
        pending_by_wait=tuple(waiting),
        submitted_jobs=jobs["submit"],
        submitted_gpus=gpus["submit"],
        started_jobs=jobs["start"],
        started_gpus=gpus["start"],
        finished_jobs=jobs["finish"],
        finished_gpus=gpus["finish"],
        finished_by_duration=tuple(durations),
    )


def pending_effective_gpus(
    active: Iterable[ActiveJob], levels: LevelSettings, unknown_level: Level = "EX"
) -> float:
    """Queued GPUs weighted by their predicted level (DProbe's multi-level demand)."""
    return sum(
        j.gpus * levels.weight(j.level or unknown_level) for j in active if j.start_ts is None
    )
