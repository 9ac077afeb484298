"""DProbe's multi-level demand: place one GPU instance on a utilisation level.

Levels as reported for DProbe (Zhou et al., Euro-Par 2024); the thresholds and weights
are the paper's reported values and are **assumptions** of this implementation (the
paper's internals are only partly public), so every one is a setting:

- ``L1``: GPU util < 25 % and GPU memory < 3 GB           -> weight 0.3 GPU
- ``L3``: GPU util > 70 % and SM util > 70 %               -> weight 0.7 GPU
- ``EX``: needs a whole GPU (exclusive, e.g. memory > 90 %) -> weight 1.0 GPU
- ``L2``: everything else                                  -> weight 0.5 GPU

The level names (``LEVELS``, the ``Level`` type) belong to the message contracts and are
defined in :mod:`dprobe.schema`; they are re-exported here.

Example:
    >>> s = LevelSettings()
    >>> classify(s, gpu_util=10.0, sm_util=5.0, mem_used_bytes=1 << 30, mem_total_bytes=80 << 30)
    'L1'
    >>> classify(s, gpu_util=95.0, sm_util=90.0, mem_used_bytes=20 << 30, mem_total_bytes=80 << 30)
    'L3'
    >>> s.weight("L3")
    0.7
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from dprobe.schema import LEVELS, Level

__all__ = ["LEVELS", "Level", "LevelSettings", "check_metrics", "classify"]


@dataclass(frozen=True)
class LevelSettings:
    """Thresholds and weights of the multi-level demand (assumptions; see module doc);
    each a finite number >= 0 (``ValueError`` naming it)."""

    l1_max_util_pct: float = 25.0
    l1_max_mem_bytes: float = 3e9
    l3_min_util_pct: float = 70.0
    l3_min_sm_util_pct: float = 70.0
    ex_min_mem_frac: float = 0.9
    weight_l1: float = 0.3
    weight_l2: float = 0.5
    weight_l3: float = 0.7
    weight_ex: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            # NaN switched a rule off (every comparison with it is false) or made the
            # effective demand NaN; a negative weight made it negative
            value = getattr(self, f.name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{f.name} must be a finite number >= 0, not {value!r}")

    def weight(self, level: Level) -> float:
        """GPUs one instance of ``level`` counts for in the effective demand."""
        return {
            "L1": self.weight_l1,
            "L2": self.weight_l2,
            "L3": self.weight_l3,
            "EX": self.weight_ex,
        }[level]


def check_metrics(whose: str = "", **metrics: float | None) -> None:
    """Refuse a NaN or infinite live metric with a ``ValueError`` naming it (``None``:
    not measured). NaN fails every threshold of :func:`classify`, so an instance with
    one would be levelled L2 without a word.

    >>> check_metrics("a running instance's ", gpu_util=40.0, sm_util=None)
    >>> check_metrics(gpu_util=float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: gpu_util must be a finite number, not nan
    """
    for name, value in metrics.items():
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{whose}{name} must be a finite number, not {value!r}")


def classify(
    s: LevelSettings,
    *,
    gpu_util: float,
    sm_util: float,
    mem_used_bytes: float,
    mem_total_bytes: float = 0.0,
    exclusive: bool = False,
) -> Level:
    """Level of one running instance from its live metrics.

    ``gpu_util`` is the instance's utilisation of its GPU (per-process SM util where
    NVML reports it per process), ``sm_util`` the SM occupancy when known (else pass
    ``gpu_util``). ``exclusive`` marks an instance known to need a whole GPU (a job
    attribute); an instance using more than ``ex_min_mem_frac`` of its GPU's memory is
    also counted exclusive, since nothing else fits beside it (assumption).
    """
    if exclusive or (mem_total_bytes > 0 and mem_used_bytes >= s.ex_min_mem_frac * mem_total_bytes):
        return "EX"
    if gpu_util > s.l3_min_util_pct and sm_util > s.l3_min_sm_util_pct:
        return "L3"
    if gpu_util < s.l1_max_util_pct and mem_used_bytes < s.l1_max_mem_bytes:
        return "L1"
    return "L2"
