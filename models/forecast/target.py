"""The one quantity every forecaster predicts: a tenant's GPU demand in a window.

**Demand = running GPUs + pending GPUs** (``running_gpus + pending_gpus`` of a
:class:`~dprobe.schema.TenantWindow`): what the tenant uses plus what its queued jobs wait
for, i.e. what its quota must cover for nobody to wait. This is the Helios definition
(running + pending GPUs of a VC). The worker, the quota planner, the simulator and
``dprobe evaluate`` all call :func:`demand_of`, so they agree on what a forecast means.

The multi-level *effective* demand (``effective_demand_gpus``: levelled instances weigh
less than a GPU) is an input feature, not the target: quota is granted in whole GPUs.

Example:
    >>> from types import SimpleNamespace
    >>> demand_of(SimpleNamespace(running_gpus=24.0, pending_gpus=8.0))
    32.0
"""

from __future__ import annotations

import math
from typing import Any


def demand_of(window: Any) -> float:
    """GPU demand of one window: running + pending GPUs (NaN/negative parts count as 0)."""
    total = 0.0
    for part in (window.running_gpus, window.pending_gpus):
        value = float(part or 0.0)
        if math.isfinite(value) and value > 0:
            total += value
    return total


def window_step_s(window: Any, default: float = 600.0) -> float:
    """Length of a window in seconds (``window_end - window_start``), else ``default``.

    >>> from types import SimpleNamespace
    >>> window_step_s(SimpleNamespace(window_start=0.0, window_end=60.0))
    60.0
    """
    try:
        step = float(window.window_end) - float(window.window_start)
    except (AttributeError, TypeError, ValueError):
        return default
    return step if math.isfinite(step) and step > 0 else default
