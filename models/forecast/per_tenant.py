"""Shared machinery of per-tenant forecasters: state copied from a prototype, spread, steps.

A :class:`PerTenantForecaster` keeps one plain-data state per tenant (a dict of numbers
and lists), each freshly built by :meth:`prototype` (never shared between tenants). It
tracks the tenant's window length and the mean absolute change between consecutive
windows, from which a p90 is derived:

    p90 = p50 + z90 * 1.25 * mean|change| * sqrt(horizon in windows)

**Assumption** (named setting ``spread_z``, default 1.2816 = the normal 90 % quantile;
1.25 turns a mean absolute deviation into a standard deviation): the forecast error grows
like a random walk. Baselines have no quantile model of their own; this gives them a
comparable, documented p90.

Example (every baseline is one):
    >>> from types import SimpleNamespace as W
    >>> from dprobe.models.forecast.baselines import LastValue
    >>> m = LastValue()
    >>> for t, y in [(600, 8.0), (1200, 10.0)]:
    ...     m.learn_one(W(tenant="a", window_start=t - 600, window_end=t,
    ...                   running_gpus=y, pending_gpus=0))
    >>> m.forecast("a", [600])[600][0]
    10.0
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

from dprobe.models.forecast.target import demand_of, first_windows

MAD_TO_SIGMA = 1.25


class PerTenantForecaster:
    """Base of the baselines: subclasses implement ``prototype``, ``update`` and ``point``."""

    name = "per-tenant"
    version = "1"

    def __init__(self, *, spread_z: float = 1.2816, spread_alpha: float = 0.05) -> None:
        self.spread_z = spread_z
        self.spread_alpha = spread_alpha
        self._tenants: dict[str, dict[str, Any]] = {}
        self._waiting: dict[str, list[float]] = {}  # first windows of unknown length

    # -- to implement -------------------------------------------------------------------
    def prototype(self, step_s: float) -> dict[str, Any]:
        """Fresh learned state of one tenant whose windows last ``step_s`` (plain data)."""
        return {}

    def update(self, state: dict[str, Any], idx: int, y: float, gap: int) -> None:
        """Learn value ``y`` at step index ``idx`` (``gap`` steps after the previous one)."""

    def point(self, state: dict[str, Any], steps: float, last: float) -> float:
        """Point forecast ``steps`` windows ahead of the last one learned (value ``last``)."""
        return last

    def observe(self, state: dict[str, Any], window: Any) -> None:
        """See the whole window before :meth:`update` (for models that use more than its
        demand); called only for a window newer than the last one learned."""

    # -- the contract -------------------------------------------------------------------
    def learn_one(self, window: Any) -> None:
        """Learn one closed window of one tenant (its demand = running + pending GPUs)."""
        tenant = str(window.tenant)
        state = self._tenants.get(tenant)
        if state is None:
            first = first_windows(self._waiting, window)
            if first is None:
                return
            step, windows = first
            self._tenants[tenant] = {
                "step": step,
                "idx": None,
                "y": 0.0,
                "mad": 0.0,
                "n": 0,
                "m": self.prototype(step),
            }
            for w in windows:
                self._learn(self._tenants[tenant], w)
            return
        self._learn(state, window)

    def _learn(self, state: dict[str, Any], window: Any) -> None:
        y = demand_of(window)
        idx = round(float(window.window_end) / state["step"])
        if state["idx"] is not None:
            gap = idx - state["idx"]
            if gap <= 0:  # a late or repeated window: keep the newest state
                return
            change = abs(y - state["y"]) / math.sqrt(gap)
            a = self.spread_alpha if state["n"] > 1 else 1.0
            state["mad"] = (1 - a) * state["mad"] + a * change
        else:
            gap = 1
        self.observe(state["m"], window)
        self.update(state["m"], idx, y, gap)
        state["idx"], state["y"] = idx, y
        state["n"] += 1

    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        """``{horizon_s: (p50, p90)}`` in GPUs; an unseen tenant gets ``(0.0, 0.0)``."""
        state = self._tenants.get(tenant)
        out: dict[float, tuple[float, float]] = {}
        for h in horizons:
            if state is None:
                out[h] = (0.0, 0.0)
                continue
            steps = max(float(h), 0.0) / state["step"]
            p50 = max(self.point(state["m"], steps, float(state["y"])), 0.0)
            p90 = p50 + self.spread_z * MAD_TO_SIGMA * state["mad"] * math.sqrt(max(steps, 1.0))
            out[h] = (p50, p90)
        return out

    def tenants(self) -> list[str]:
        """Tenants seen so far."""
        return sorted(self._tenants)

    def forget(self, tenant: str) -> None:
        """Drop what was learned of ``tenant`` (it starts afresh if it comes back)."""
        self._tenants.pop(tenant, None)
        self._waiting.pop(tenant, None)

    def state_dict(self) -> dict[str, Any]:
        """Learned state only (plain data; JSON-serialisable)."""
        return {"tenants": copy.deepcopy(self._tenants), "waiting": copy.deepcopy(self._waiting)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the learned state with ``state`` (as returned by :meth:`state_dict`)."""
        self._tenants = copy.deepcopy(dict(state["tenants"]))
        self._waiting = copy.deepcopy(dict(state.get("waiting", {})))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"
