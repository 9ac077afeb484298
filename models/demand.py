"""DProbe's multi-level demand of one tenant: levelled running instances + levelled queue.

Effective demand (DProbe, Zhou et al., Euro-Par 2024, as reported; the thresholds and
weights are :class:`~dprobe.models.levels.LevelSettings`, all **assumptions**):

    effective = sum over running instances of weight(level from live metrics)
              + sum over pending jobs of gpus * weight(level the profiler expects)

A running instance is levelled by :func:`~dprobe.models.levels.classify`. A pending job
is levelled by the :class:`~dprobe.models.profiler.JobProfiler` from its attributes; with
no profiler, or when the profiler can only fall back, it counts as
``unknown_pending_level`` (default ``"EX"``: a whole GPU per requested GPU, the safe
choice for quota, an assumption).

Example:
    >>> from dprobe.models.profiler import JobProfiler
    >>> from dprobe.models.profiles import shipped_profiles
    >>> running = [RunningInstance(gpu_util=90, sm_util=85, mem_used_bytes=20e9),
    ...            RunningInstance(gpu_util=5, mem_used_bytes=1e9)]
    >>> pending = [PendingJob(gpus=8, family="ResNet50", batch_size=128)]
    >>> d = estimate_demand(running, pending, profiler=JobProfiler().fit(shipped_profiles()))
    >>> d.level_counts, round(d.running_effective_gpus, 2), round(d.pending_effective_gpus, 2)
    ({'L1': 1, 'L2': 0, 'L3': 1, 'EX': 0}, 1.0, 5.6)
    >>> round(d.effective_demand_gpus, 2), d.pending_gpus
    (6.6, 8.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from dprobe.models.levels import LEVELS, Level, LevelSettings, check_metrics, classify
from dprobe.models.profiler import JobProfiler
from dprobe.models.profiles import shipped_profiles
from dprobe.schema import JobEvent


@dataclass(frozen=True, slots=True)
class RunningInstance:
    """Live metrics of one running GPU instance (``sm_util`` None -> use ``gpu_util``)."""

    gpu_util: float
    mem_used_bytes: float
    sm_util: float | None = None
    mem_total_bytes: float = 0.0
    exclusive: bool = False


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A queued job: GPUs requested and whatever model attributes the scheduler knows."""

    gpus: float
    family: str | None = None
    batch_size: int | None = None
    amp: bool | None = None
    params_m: float | None = None
    exclusive: bool = False


@dataclass(frozen=True)
class DemandEstimate:
    """A tenant's multi-level demand at one moment (GPUs)."""

    level_counts: dict[str, int]
    running_effective_gpus: float
    pending_effective_gpus: float
    running_instances: int
    pending_gpus: float
    pending_levels: dict[str, float] = field(default_factory=dict)

    @property
    def effective_demand_gpus(self) -> float:
        return self.running_effective_gpus + self.pending_effective_gpus


def pending_level(
    job: PendingJob,
    profiler: JobProfiler | None,
    unknown_pending_level: Level = "EX",
) -> Level:
    """Level of a queued job: the profiler's estimate, else ``unknown_pending_level``.

    >>> pending_level(PendingJob(gpus=1), None)
    'EX'
    """
    _check_level(unknown_pending_level)
    if job.exclusive:
        return "EX"
    if profiler is None:
        return unknown_pending_level
    est = profiler.estimate(
        family=job.family, batch_size=job.batch_size, amp=job.amp, params_m=job.params_m
    )
    return unknown_pending_level if est.source == "fallback" else est.level


def _check_level(level: str) -> None:
    """A level outside the four would be returned as a job's level, or fail as a
    ``KeyError`` when weighted; refuse it by name instead."""
    if level not in LEVELS:
        raise ValueError(f"unknown_pending_level must be one of {', '.join(LEVELS)}, not {level!r}")


def pending_job_of(ev: JobEvent) -> PendingJob:
    """The queued job a scheduler's JobEvent describes (GPUs and model attributes)."""
    return PendingJob(
        gpus=float(ev.gpus),
        family=ev.model,
        batch_size=ev.batch_size,
        amp=ev.amp,
        params_m=ev.params_m,
    )


def predicted_level(ev: JobEvent, profiler: JobProfiler | None) -> Level | None:
    """The level the profiler predicts for the job of ``ev``; ``None`` when it cannot
    (no profiler, or only its fallback), so the caller's unknown level applies.

    >>> ev = JobEvent(ts=0, event="submit", job="j", tenant="a", gpus=1, model="NeuMF",
    ...               batch_size=256, amp=True)
    >>> predicted_level(ev, default_profiler()), predicted_level(ev, None)
    ('L1', None)
    """
    if profiler is None:
        return None
    job = pending_job_of(ev)
    est = profiler.estimate(
        family=job.family, batch_size=job.batch_size, amp=job.amp, params_m=job.params_m
    )
    return None if est.source == "fallback" else est.level


def default_profiler(levels: LevelSettings | None = None) -> JobProfiler:
    """The job profiler fitted on the profile table shipped with dprobe."""
    return JobProfiler(levels=levels).fit(shipped_profiles())


def estimate_demand(
    running: Iterable[RunningInstance],
    pending: Iterable[PendingJob] = (),
    *,
    settings: LevelSettings | None = None,
    profiler: JobProfiler | None = None,
    unknown_pending_level: Level = "EX",
) -> DemandEstimate:
    """Multi-level demand of one tenant from its running instances and its queue.

    A queued job of 0 GPUs or fewer is left out; a NaN or infinite number of GPUs, or a
    NaN or infinite metric of a running instance, is refused with a ``ValueError``.
    """
    _check_level(unknown_pending_level)  # also when the queue is empty
    s = settings or LevelSettings()
    counts: dict[str, int] = dict.fromkeys(LEVELS, 0)
    running_eff = 0.0
    n_running = 0
    for inst in running:
        check_metrics(
            "a running instance's ",
            gpu_util=inst.gpu_util,
            sm_util=inst.sm_util,
            mem_used_bytes=inst.mem_used_bytes,
            mem_total_bytes=inst.mem_total_bytes,
        )
        level = classify(
            s,
            gpu_util=inst.gpu_util,
            sm_util=inst.gpu_util if inst.sm_util is None else inst.sm_util,
            mem_used_bytes=inst.mem_used_bytes,
            mem_total_bytes=inst.mem_total_bytes,
            exclusive=inst.exclusive,
        )
        counts[level] += 1
        running_eff += s.weight(level)
        n_running += 1
    pending_eff = 0.0
    pending_gpus = 0.0
    by_level: dict[str, float] = dict.fromkeys(LEVELS, 0.0)
    for job in pending:
        if not math.isfinite(job.gpus):  # it made the whole demand NaN or infinite
            raise ValueError(
                f"a pending job's gpus must be a finite number (<= 0: ignored), not {job.gpus!r}"
            )
        if job.gpus <= 0:
            continue
        level = pending_level(job, profiler, unknown_pending_level)
        pending_eff += job.gpus * s.weight(level)
        pending_gpus += job.gpus
        by_level[level] += job.gpus
    return DemandEstimate(
        level_counts=counts,
        running_effective_gpus=running_eff,
        pending_effective_gpus=pending_eff,
        running_instances=n_running,
        pending_gpus=pending_gpus,
        pending_levels=by_level,
    )
