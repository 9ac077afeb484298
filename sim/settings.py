"""Settings of one simulation run. Every value here is an assumption, named and documented
in ``docs/simulation.md``.

Example:
    >>> s = SimSettings()
    >>> s.node_gpus, s.interval_s, s.horizon_s, s.move_latency_s, s.reclaim
    (8, 300.0, 600.0, 300.0, 'wait')
    >>> s.lead_s  # the planner sizes quotas this far ahead: one move plus one interval
    600.0
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dprobe.models.planner import PlannerSettings
from dprobe.sim.policies import PolicySettings

MODES = ("static", "reactive", "predictive", "oracle")
RECLAIMS = ("wait", "preempt")


@dataclass(frozen=True)
class SimSettings:
    """One run's knobs.

    - ``interval_s``: quota planning interval (reactive, predictive, oracle), also the
      length of the demand windows the forecaster learns from;
    - ``horizon_s``: the forecast horizon the planner sizes quotas to;
    - ``guarantee_fraction``: share of a VC's static quota (whole nodes, rounded down) it
      never lends;
    - ``preempt_overhead_s``: work a job loses when its scheduling policy preempts it (0:
      the policy suspends it with a checkpoint);
    - ``move_latency_s``: a node that changes VC serves nobody for this long (drain,
      relabel, health check, image pull);
    - ``reclaim``: a VC that needs its own nodes back from a borrower ``wait``s for them to
      go idle (the borrower starts nothing new on them) or ``preempt``s the borrower's jobs
      on them;
    - ``checkpoint_interval_s``: a job checkpoints after every this many seconds of work
      since it (re)started; a job preempted to reclaim a node loses the work since its
      last checkpoint (0: nothing is lost);
    - ``lend_horizon_s``: predictive and oracle modes keep idle nodes a VC is forecast to
      need within this long instead of lending them; ``None``: the reclaim rule's default
      (:attr:`hold_s`);
    - ``gate``: the predictive mode falls back, per VC, to planning on demand now while its
      forecasts have not been paying (:mod:`dprobe.models.forecast.gate`);
    - ``forecaster``: the model of the predictive mode (see :mod:`dprobe.models.forecast.registry`);
    - ``calibrate``: its p90 calibrated online at the horizons the planner asks for
      (:mod:`dprobe.models.forecast.calibration`), as the worker does by default.
    """

    node_gpus: int = 8
    interval_s: float = 300.0
    horizon_s: float = 600.0
    guarantee_fraction: float = 0.5
    preempt_overhead_s: float = 0.0
    move_latency_s: float = 300.0
    reclaim: str = "wait"
    checkpoint_interval_s: float = 1800.0
    lend_horizon_s: float | None = None
    gate: bool = True
    forecaster: str = "dprobe-mmoe"
    calibrate: bool = True
    seed: int = 0
    policy: PolicySettings = field(default_factory=PolicySettings)
    planner: PlannerSettings = field(default_factory=PlannerSettings)

    @property
    def lead_s(self) -> float:
        """How far ahead quotas are planned: a node moved now serves after the move
        latency and stays until the next plan, so at least ``horizon_s``."""
        return max(self.horizon_s, self.move_latency_s + self.interval_s)

    @property
    def hold_s(self) -> float:
        """The lend horizon in force: ``lend_horizon_s``, else the reclaim rule's default.
        With ``wait`` a lent node that is wanted back costs only a wait: nothing is held
        (0). With ``preempt`` it costs the borrower's work since its last checkpoint:
        nodes the owner is forecast to need within one checkpoint interval are held.

        >>> SimSettings(reclaim="preempt").hold_s, SimSettings(reclaim="wait").hold_s
        (1800.0, 0.0)
        >>> SimSettings(reclaim="preempt", checkpoint_interval_s=0.0).hold_s  # nothing lost
        0.0
        """
        if self.lend_horizon_s is not None:
            return self.lend_horizon_s
        return self.checkpoint_interval_s if self.reclaim == "preempt" else 0.0

    def __post_init__(self) -> None:
        if self.node_gpus < 1 or self.interval_s <= 0 or self.horizon_s <= 0:
            raise ValueError("node_gpus, interval_s and horizon_s must be > 0")
        if not 0 <= self.guarantee_fraction <= 1:
            raise ValueError("guarantee_fraction must be within [0, 1]")
        if not self.move_latency_s >= 0 or not self.checkpoint_interval_s >= 0:
            raise ValueError("move_latency_s and checkpoint_interval_s must be >= 0")
        if self.lend_horizon_s is not None and not self.lend_horizon_s >= 0:
            raise ValueError("lend_horizon_s must be >= 0")
        if self.reclaim not in RECLAIMS:
            raise ValueError(f"reclaim must be one of {', '.join(RECLAIMS)}")
        if self.planner.node_gpus != self.node_gpus:
            raise ValueError("planner.node_gpus must equal node_gpus")
