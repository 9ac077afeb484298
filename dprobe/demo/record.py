"""What the demo saw: demand per window, forecasts, quotas and scaling events per tenant.

Plain data, filled from three sources and read by the summary and the chart:

- TenantWindows (``dprobe.features``): demand = running + pending GPUs
  (:func:`dprobe.models.forecast.target.demand_of`) at each window end;
- ScalingEvents (``dprobe.scaling-events``): deduplicated by ``event_id``; each carries
  the quota before and after it and the forecast behind it, made at its ``window_end``.
  Quotas change only through events, so these give the exact quota over time;
- scrapes of the worker's ``/metrics``: the latest forecasts of every tenant (the worker
  forecasts every tenant at every window; events carry only the ones that moved quota),
  the current quotas, and the worker's count of late partials. A scrape does not say
  which window a forecast was made at: it is filed under the tenant's newest window end
  seen on ``dprobe.features`` at scrape time, so a forecast may now and then be filed one
  window early or late.

Example:
    >>> from types import SimpleNamespace as W
    >>> rec = Recording()
    >>> rec.add_window(W(tenant="vc-a", window_end=600.0, running_gpus=3.0, pending_gpus=1.0))
    >>> rec.add_scrape(Scrape(forecasts={("vc-a", 3600.0): (4.5, 6.0)}, quotas={"vc-a": 8.0}))
    >>> rec.demand["vc-a"], rec.forecasts["vc-a"][3600.0], rec.scraped_quota["vc-a"]
    ({600.0: 4.0}, {600.0: (4.5, 6.0)}, 8.0)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dprobe.models.forecast.target import demand_of
from dprobe.sinks.seen_ids import SeenIds


@dataclass(frozen=True)
class Scrape:
    """The values the demo reads from one scrape of the worker's ``/metrics``."""

    forecasts: dict[tuple[str, float], tuple[float, float]] = field(default_factory=dict)
    quotas: dict[str, float] = field(default_factory=dict)
    late_partials: int | None = None  # dprobe_late_partials_total of the worker
    dead_letters: dict[str, int] | None = None  # dprobe_deadletters_total by reason


@dataclass
class Recording:
    """Everything observed during one run, keyed by tenant and event time."""

    demand: dict[str, dict[float, float]] = field(default_factory=dict)  # end -> GPUs
    forecasts: dict[str, dict[float, dict[float, tuple[float, float]]]] = field(
        default_factory=dict
    )  # tenant -> horizon -> made at window end -> (p50, p90)
    scraped_quota: dict[str, float] = field(default_factory=dict)  # latest, per tenant
    late_partials: int | None = None
    dead_letters: dict[str, int] | None = None  # by reason, from the latest scrape
    events: list[Any] = field(default_factory=list)  # ScalingEvents, first delivery only
    actions: Counter[str] = field(default_factory=Counter)
    plans: set[str] = field(default_factory=set)
    duplicates: int = 0
    windows: int = 0
    lost_snapshots: int = 0
    scrapes: int = 0
    lag: list[tuple[float, float]] = field(default_factory=list)  # (wall time, lag sum)
    _seen: SeenIds = field(default_factory=SeenIds)

    @property
    def tenants(self) -> list[str]:
        return sorted(set(self.demand) | set(self.forecasts) | set(self.scraped_quota))

    def latest_end(self, tenant: str) -> float | None:
        ends = self.demand.get(tenant)
        return max(ends) if ends else None

    def add_window(self, w: Any) -> None:
        """One TenantWindow: its demand at its end."""
        self.windows += 1
        self.lost_snapshots += int(getattr(w, "lost_snapshots", 0) or 0)
        end = float(w.window_end)
        self.demand.setdefault(w.tenant, {})[end] = demand_of(w)

    def add_event(self, ev: Any) -> bool:
        """One ScalingEvent; ``False`` (and counted) when its ``event_id`` was seen."""
        if not self._seen.add(ev.event_id):
            self.duplicates += 1
            return False
        self.events.append(ev)
        self.actions[ev.action] += 1
        self.plans.add(ev.plan_id)
        at = float(ev.window_end or ev.ts)
        horizon = float(ev.forecast.horizon_s)
        by_horizon = self.forecasts.setdefault(ev.tenant, {}).setdefault(horizon, {})
        by_horizon[at] = (float(ev.forecast.p50), float(ev.forecast.p90))
        return True

    def add_scrape(self, scrape: Scrape) -> None:
        """File a scrape's forecasts under each tenant's newest window end; keep its quotas."""
        self.scrapes += 1
        self.scraped_quota.update(scrape.quotas)
        if scrape.late_partials is not None:
            self.late_partials = scrape.late_partials
        if scrape.dead_letters is not None:
            self.dead_letters = dict(scrape.dead_letters)
        for (tenant, horizon), pair in scrape.forecasts.items():
            at = self.latest_end(tenant)
            if at is not None:
                self.forecasts.setdefault(tenant, {}).setdefault(horizon, {})[at] = pair

    def add_lag(self, wall: float, lag_sum: float) -> None:
        """The worker group's consumer lag (records, summed over its input topics)."""
        self.lag.append((wall, lag_sum))
