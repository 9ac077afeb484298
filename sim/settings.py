"""Settings of one simulation run. Every value here is an assumption, named and documented
in ``docs/simulation.md``.

Example:
    >>> s = SimSettings()
    >>> s.node_gpus, s.interval_s, s.horizon_s
    (8, 300.0, 600.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dprobe.models.planner import PlannerSettings
from dprobe.sim.policies import PolicySettings

MODES = ("static", "reactive", "predictive", "oracle")


@dataclass(frozen=True)
class SimSettings:
    """One run's knobs.

    - ``interval_s``: quota planning interval (reactive, predictive, oracle), also the
      length of the demand windows the forecaster learns from;
    - ``horizon_s``: the forecast horizon the planner sizes quotas to;
    - ``guarantee_fraction``: share of a VC's static quota (whole nodes, rounded down) it
      never lends;
    - ``preempt_overhead_s``: work lost by a preempted job (0: checkpoints are free);
    - ``forecaster``: the model of the predictive mode (see :mod:`dprobe.models.forecast.registry`);
    - ``calibrate``: its p90 calibrated online at the horizons the planner asks for
      (:mod:`dprobe.models.forecast.calibration`), as the worker does by default.
    """

    node_gpus: int = 8
    interval_s: float = 300.0
    horizon_s: float = 600.0
    guarantee_fraction: float = 0.5
    preempt_overhead_s: float = 0.0
    forecaster: str = "dprobe-mmoe"
    calibrate: bool = True
    seed: int = 0
    policy: PolicySettings = field(default_factory=PolicySettings)
    planner: PlannerSettings = field(default_factory=PlannerSettings)

    def __post_init__(self) -> None:
        if self.node_gpus < 1 or self.interval_s <= 0 or self.horizon_s <= 0:
            raise ValueError("node_gpus, interval_s and horizon_s must be > 0")
        if not 0 <= self.guarantee_fraction <= 1:
            raise ValueError("guarantee_fraction must be within [0, 1]")
        if self.planner.node_gpus != self.node_gpus:
            raise ValueError("planner.node_gpus must equal node_gpus")
