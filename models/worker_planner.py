"""The planner a stream worker runs, from its settings: sizing (quantile, headroom), HPA
damping and rate limits, and the waiting-jobs-first pass, as ``[worker]`` gives them.

One mapping for the worker and for ``dprobe simulate --worker-planner``, so a policy tried
in the simulator is the one the worker would apply.

Example:
    >>> from dprobe.config import WorkerSettings
    >>> p = planner_settings_of(WorkerSettings(plan_headroom=0.1, plan_scale_up_max_nodes=1))
    >>> p.headroom, p.damping.scale_up_max_nodes, p.damping.scale_down_stabilization_s
    (0.1, 1, 300.0)
"""

from __future__ import annotations

from typing import Literal, cast

from dprobe.config import WorkerSettings
from dprobe.models.planner import PlannerSettings
from dprobe.models.planner_damping import DampingSettings


def planner_settings_of(s: WorkerSettings, *, node_gpus: int | None = None) -> PlannerSettings:
    """The :class:`PlannerSettings` of ``s`` (``node_gpus``: another node size, e.g. the
    simulator's)."""
    return PlannerSettings(
        node_gpus=s.node_gpus if node_gpus is None else node_gpus,
        quantile=cast(Literal["p50", "p90"], s.plan_quantile),  # WorkerSettings checks it
        headroom=s.plan_headroom,
        urgent_first=s.plan_urgent_first,
        damping=DampingSettings(
            tolerance=s.plan_tolerance,
            cooldown_s=s.plan_cooldown_s,
            scale_down_stabilization_s=s.plan_scale_down_stabilization_s,
            scale_up_stabilization_s=s.plan_scale_up_stabilization_s,
            period_s=s.plan_period_s,
            scale_up_max_percent=s.plan_scale_up_max_percent,
            scale_up_max_nodes=s.plan_scale_up_max_nodes,
            scale_down_max_percent=s.plan_scale_down_max_percent,
        ),
    )
