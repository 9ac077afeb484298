"""TenantWindows for the plan-loop tests: a tenant's running and pending GPUs at a window end.

>>> w = demand_window("vc-a", 120.0, running=4.0, pending=2.0)
>>> w.window_start, w.effective_demand_gpus
(60.0, 6.0)
"""

from __future__ import annotations

from dprobe.schema import LevelCounts, TenantWindow


def demand_window(
    tenant: str,
    end: float,
    *,
    running: float,
    pending: float = 0.0,
    hosts: int = 1,
    length_s: float = 60.0,
) -> TenantWindow:
    """One closed window ending at ``end``: ``running`` GPUs busy, ``pending`` waiting, the
    demand their sum."""
    return TenantWindow(
        tenant=tenant,
        window_start=end - length_s,
        window_end=end,
        hosts=hosts,
        gpus_busy=running,
        instances=running,
        util_sum=0.0,
        level_counts=LevelCounts(),
        effective_demand_gpus=running + pending,
        pending_gpus=pending,
        running_gpus=running,
    )
