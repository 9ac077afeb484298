"""Fall back to demand now, per tenant, while a forecaster's p90 has not been paying.

A quota planner that acts on forecasts moves capacity *ahead* of demand; when a tenant's
forecasts are worse than simply planning on its demand now (what a reactive rule does),
acting ahead costs more than it saves. :class:`Gated` wraps any forecaster of the
registry and measures that online, per tenant, the way the multi-task model's
combination measures its members:

- every time the planner asks for the tenant's forecast at ``horizon_s`` (the planner's
  lead), the wrapper keeps ``(p90, demand now)``; when the first window ending at or
  after ``horizon_s`` later arrives, both are scored against its demand with the pinball
  loss at ``level`` (0.9: a shortfall costs nine times an idle GPU);
- the two losses are averaged with exponential forgetting (half-life ``halflife``
  scored forecasts);
- while the forecast's average loss exceeds the reactive one's by more than ``margin``
  (relative), and at least ``min_scores`` forecasts have been scored, the tenant's
  forecasts at every horizon are its demand now: p50 = p90 = the last window's demand.
  Scoring goes on, so a tenant whose forecasts start paying again gets them back.

**Assumptions**: the planner's cost of an error is asymmetric like the pinball loss at the
planner's quantile; the reactive rule's implicit forecast is the demand of the last
window. State is plain data, so checkpoints load with ``weights_only=True``.

Example:
    >>> from types import SimpleNamespace as W
    >>> from dprobe.models.forecast.baselines import RecentPeak
    >>> m = Gated(RecentPeak(), horizon_s=600.0, min_scores=3)
    >>> for i in range(12):  # a spike once, then flat: the remembered peak does not pay
    ...     y = 30.0 if i == 1 else 10.0
    ...     m.learn_one(W(tenant="a", window_start=300.0 * i, window_end=300.0 * (i + 1),
    ...                   running_gpus=y, pending_gpus=0.0))
    ...     _ = m.forecast("a", [600.0])
    >>> m.paying("a"), m.forecast("a", [600.0])
    (False, {600.0: (10.0, 10.0)})
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from dprobe.models.forecast.base import Forecaster, forget
from dprobe.models.forecast.quantile_loss import pinball
from dprobe.models.forecast.target import demand_of

VERSION = "gate1"


class Gated:
    """``inner``, with each tenant's forecasts replaced by its demand now while they have
    not been paying (see the module doc for the settings)."""

    def __init__(
        self,
        inner: Forecaster,
        *,
        horizon_s: float = 600.0,
        level: float = 0.9,
        halflife: float = 288.0,
        min_scores: int = 12,
        margin: float = 0.0,
    ) -> None:
        if horizon_s <= 0 or not 0.0 < level < 1.0 or halflife <= 0 or min_scores < 0:
            raise ValueError("horizon_s, halflife > 0; level within (0, 1); min_scores >= 0")
        if margin < 0:
            raise ValueError("margin must be >= 0")
        self.inner = inner
        self.horizon_s = float(horizon_s)
        self.level = level
        self.halflife = halflife
        self.min_scores = min_scores
        self.margin = margin
        self.name: str = inner.name
        self.version: str = f"{inner.version}+{VERSION}"
        self._decay = 0.5 ** (1.0 / halflife)
        # per tenant: last demand and window end, pending [due, p90, base], losses, count
        self._tenants: dict[str, dict[str, Any]] = {}

    def learn_one(self, window: Any) -> None:
        """Let the inner model learn ``window``; score the tenant's forecasts it matures."""
        self.inner.learn_one(window)
        end = float(window.window_end)
        st = self._tenants.setdefault(
            str(window.tenant),
            {"last": 0.0, "end": None, "pending": [], "fc": 0.0, "re": 0.0, "n": 0},
        )
        if st["end"] is not None and end <= st["end"]:
            return
        y = demand_of(window)
        keep = []
        for due, p90, base in st["pending"]:
            if due > end + 1e-6:
                keep.append([due, p90, base])
                continue
            d = self._decay
            st["fc"] = d * st["fc"] + (1 - d) * pinball(y - p90, self.level)
            st["re"] = d * st["re"] + (1 - d) * pinball(y - base, self.level)
            st["n"] += 1
        st["pending"] = keep
        st["last"], st["end"] = y, end

    def paying(self, tenant: str) -> bool:
        """Whether ``tenant``'s forecasts are used (True until enough have been scored)."""
        st = self._tenants.get(tenant)
        if st is None or st["n"] < self.min_scores:
            return True
        return bool(st["fc"] <= st["re"] * (1.0 + self.margin) + 1e-12)

    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        """The inner forecast, or the demand now at every horizon while it has not paid."""
        out = self.inner.forecast(tenant, horizons)
        st = self._tenants.get(tenant)
        if st is None or st["end"] is None:
            return out
        at = min(horizons, key=lambda h: abs(h - self.horizon_s), default=None)
        if at is not None and abs(at - self.horizon_s) < 1e-6:
            due = st["end"] + self.horizon_s
            if not st["pending"] or st["pending"][-1][0] != due:  # once per window
                st["pending"].append([due, out[at][1], st["last"]])
        if self.paying(tenant):
            return out
        now = float(st["last"])
        return dict.fromkeys(horizons, (now, now))

    def losses(self, tenant: str) -> tuple[float, float, int]:
        """``(forecast loss, reactive loss, scored)`` of ``tenant`` so far."""
        st = self._tenants.get(tenant)
        return (0.0, 0.0, 0) if st is None else (st["fc"], st["re"], st["n"])

    def forget(self, tenant: str) -> None:
        """Drop ``tenant``'s scores here and its state in the inner model (where it can)."""
        self._tenants.pop(tenant, None)
        forget(self.inner, tenant)

    def state_dict(self) -> dict[str, Any]:
        """``{"inner": inner state, "gate": plain data}`` (a copy)."""
        return {"inner": self.inner.state_dict(), "gate": copy.deepcopy(self._tenants)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; a state without ``"gate"`` is the inner
        model's, loaded into it with the gate starting fresh."""
        if "gate" not in state or "inner" not in state:
            self.inner.load_state_dict(state)
            self._tenants = {}
            return
        self.inner.load_state_dict(state["inner"])
        self._tenants = {str(t): dict(v) for t, v in copy.deepcopy(state["gate"]).items()}

    def __repr__(self) -> str:
        params = ", ".join(
            f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k != "inner"
        )
        return f"{type(self).__name__}({self.inner!r}, {params})"
