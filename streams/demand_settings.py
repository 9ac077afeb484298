"""The worker's multi-level demand from its settings: level rules, job flow, job levels.

Example:
    >>> from dprobe.config import WorkerSettings
    >>> s = WorkerSettings(level_weights=(0.25, 0.5, 0.75, 1.0), unknown_pending_level="L2")
    >>> level_settings(s).weight("L3"), flow_settings(s).unknown_level
    (0.75, 'L2')
    >>> from dprobe.schema import JobEvent
    >>> level_of = job_level_of(s)
    >>> level_of(JobEvent(ts=0, event="submit", job="j", tenant="a", gpus=1, model="NeuMF",
    ...                   batch_size=256, amp=True))
    'L1'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from dprobe.config import WorkerSettings
from dprobe.models.demand import default_profiler, predicted_level
from dprobe.models.job_flow import FlowSettings
from dprobe.models.levels import Level, LevelSettings
from dprobe.schema import JobEvent


def level_settings(s: WorkerSettings) -> LevelSettings:
    """Thresholds and weights of the levels (``level_*`` settings)."""
    w1, w2, w3, wx = s.level_weights
    return LevelSettings(
        l1_max_util_pct=s.level_l1_max_util_pct,
        l1_max_mem_bytes=s.level_l1_max_mem_bytes,
        l3_min_util_pct=s.level_l3_min_util_pct,
        l3_min_sm_util_pct=s.level_l3_min_sm_util_pct,
        ex_min_mem_frac=s.level_ex_min_mem_frac,
        weight_l1=w1,
        weight_l2=w2,
        weight_l3=w3,
        weight_ex=wx,
    )


def flow_settings(s: WorkerSettings) -> FlowSettings:
    """Bucket edges of the job flow and the level of a queued job never levelled."""
    return FlowSettings(edges_s=s.flow_edges_s, unknown_level=cast(Level, s.unknown_pending_level))


def job_level_of(s: WorkerSettings) -> Callable[[JobEvent], Level | None] | None:
    """The profiler's level of a job from its event (``None`` with ``profile_pending`` off)."""
    if not s.profile_pending:
        return None
    profiler = default_profiler(level_settings(s))
    return lambda ev: predicted_level(ev, profiler)
