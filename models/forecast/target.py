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
from types import SimpleNamespace
from typing import Any


def demand_of(window: Any) -> float:
    """GPU demand of one window: running + pending GPUs (NaN/negative parts count as 0)."""
    return gpus_or_zero(window.running_gpus) + gpus_or_zero(window.pending_gpus)


def gpus_or_zero(value: Any) -> float:
    """A GPU count as a float; None, NaN, infinite or negative counts as 0.

    >>> gpus_or_zero(3), gpus_or_zero(float("nan")), gpus_or_zero(None), gpus_or_zero(-2)
    (3.0, 0.0, 0.0, 0.0)
    """
    x = float(value or 0.0)
    return x if math.isfinite(x) and x > 0 else 0.0


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


def first_windows(waiting: dict[str, list[float]], window: Any) -> tuple[float, list[Any]] | None:
    """Window length of a tenant's first window(s), and the windows to learn with it.

    A window that states its length (``window_end - window_start > 0``) is learned at
    once. One that does not (no ``window_start``, or a zero-length first window) waits in
    ``waiting`` (plain data: ``[end, running, pending, quota or -1]``) until the tenant's
    next window; the length is then the gap between the two ends, and both are learned.
    Returns ``None`` while waiting.

    >>> from types import SimpleNamespace as W
    >>> waiting = {}
    >>> first_windows(waiting, W(tenant="a", window_end=300.0, running_gpus=4.0, pending_gpus=0.0))
    >>> step, ws = first_windows(waiting, W(tenant="a", window_end=600.0, running_gpus=5.0,
    ...                                     pending_gpus=1.0))
    >>> step, [(w.window_end, demand_of(w)) for w in ws]
    (300.0, [(300.0, 4.0), (600.0, 6.0)])
    """
    tenant = str(window.tenant)
    step = window_step_s(window, default=0.0)
    end = float(window.window_end)
    held = waiting.pop(tenant, None)
    if step <= 0 and (held is None or end <= held[0]):
        quota = getattr(window, "quota_gpus", None)
        waiting[tenant] = [
            end,
            float(window.running_gpus or 0.0),
            float(window.pending_gpus or 0.0),
            float(quota) if quota is not None else -1.0,
        ]
        return None
    if step <= 0 and held is not None:
        step = end - held[0]
    out: list[Any] = []
    if held is not None and held[0] < end:
        out.append(
            SimpleNamespace(
                tenant=tenant,
                window_start=held[0] - step,
                window_end=held[0],
                running_gpus=held[1],
                pending_gpus=held[2],
                quota_gpus=held[3] if held[3] >= 0 else None,
            )
        )
    out.append(window)
    return step, out
