"""Online calibration of any forecaster's p90: conformal-style, per tenant and horizon.

:class:`Calibrated` wraps a forecaster of the registry and keeps its contract
(``learn_one`` / ``forecast`` / ``state_dict`` / ``load_state_dict``). p50 is the inner
model's, untouched; p90 is corrected so that, over recent matured forecasts, about
``level`` (0.9) of actual demands lie at or below it. How (every choice a setting):

- When the wrapper learns tenant ``a``'s window ending at ``T``, it asks the inner model
  for ``(p50, p90)`` at each calibration horizon ``h`` in ``horizons_s`` [600, 3600,
  21600 s] and keeps them. When ``a``'s window ending at ``T + h`` arrives, that forecast
  has *matured*: its score is ``y - p50`` (``score="residual"``, the default) or
  ``y - p90`` (``score="quantile"``: conformalised quantile regression, which keeps the
  inner model's own spread and shifts it). Forecasts whose target window never arrives
  are dropped. Nothing is learned from a window before it has closed.
- The tenant's correction ``q`` at a horizon is the conformal quantile (the
  ``ceil(level' x (n + 1))``-th smallest) of its last ``window`` [500] scores, shrunk
  towards the same quantile of the last ``pool_size`` [2000] scores of *all* tenants:
  ``q = (n q_tenant + prior_n q_pool) / (n + prior_n)`` with ``prior_n`` [50], so a young
  tenant (few matured forecasts) borrows from the others. The pool is refreshed once per
  window end. Until ``min_scores`` [20] scores exist in the pool, p90 stays the inner one.
- The working level ``level'`` adapts to misses (adaptive conformal inference, Gibbs &
  Candes, NeurIPS 2021), once per horizon for all tenants: every matured forecast moves
  it by ``adapt_gamma x (miss - (1 - level))`` [0.002], within
  ``level +- adapt_max`` [0.07], so when the error distribution shifts, coverage
  recovers before the window of scores has turned over.
- Calibrated p90 = ``max(p50 + q, p50)`` (``residual``) or ``max(p90 + q, p50)``
  (``quantile``). A requested horizon between calibrated ones gets ``q`` interpolated
  linearly (from 0 at horizon 0 below the first); beyond the last, the last ``q``.
  A horizon shorter than the tenant's window is not calibrated.

**Assumptions**: scores of one tenant are exchangeable over its last ``window`` matured
forecasts; other tenants' scores in GPUs are a fair prior for a young tenant; one
adaptive level per horizon fits all tenants. State is plain data (lists, floats, dicts)
plus the inner model's own state, so checkpoints load with ``weights_only=True``.

Example:
    >>> from types import SimpleNamespace as W
    >>> from dprobe.models.forecast.baselines import LastValue
    >>> m = Calibrated(LastValue(), horizons_s=(600.0,), min_scores=5)
    >>> for i in range(61):  # demand 10, one window in five jumps to 14
    ...     y = 14.0 if i % 5 == 4 else 10.0
    ...     m.learn_one(W(tenant="a", window_start=600.0 * i, window_end=600.0 * (i + 1),
    ...                   running_gpus=y, pending_gpus=0.0))
    >>> m.name, m.forecast("a", [600.0])
    ('last-value', {600.0: (10.0, 14.0)})
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dprobe.models.forecast.base import Forecaster
from dprobe.models.forecast.target import demand_of, window_step_s

SCORES = ("residual", "quantile")
VERSION = "cal1"


def conformal_quantile(scores: Sequence[float], level: float) -> float:
    """The ``ceil(level x (n + 1))``-th smallest of ``scores`` (the largest if beyond n).

    >>> conformal_quantile([3.0, 1.0, 2.0, 0.0], 0.5)
    2.0
    >>> conformal_quantile([3.0, 1.0, 2.0, 0.0], 0.9)
    3.0
    """
    n = len(scores)
    k = min(max(math.ceil(level * (n + 1)) - 1, 0), n - 1)
    return float(np.partition(np.asarray(scores, dtype=float), k)[k])


class Calibrated:
    """``inner`` with its p90 calibrated online (see the module doc for the settings)."""

    def __init__(
        self,
        inner: Forecaster,
        *,
        horizons_s: Sequence[float] = (600.0, 3600.0, 21600.0),
        level: float = 0.9,
        score: str = "residual",
        window: int = 500,
        pool_size: int = 2000,
        prior_n: float = 50.0,
        min_scores: int = 20,
        adapt_gamma: float = 0.002,
        adapt_max: float = 0.07,
    ) -> None:
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be within (0, 1), got {level}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        if window < 1 or pool_size < 1 or min_scores < 1 or prior_n < 0:
            raise ValueError("window, pool_size and min_scores must be >= 1, prior_n >= 0")
        if not horizons_s or any(h <= 0 for h in horizons_s):
            raise ValueError("horizons_s must be positive seconds")
        if adapt_gamma < 0 or adapt_max < 0:
            raise ValueError("adapt_gamma and adapt_max must be >= 0")
        self.inner = inner
        self.horizons_s = tuple(sorted(float(h) for h in horizons_s))
        self.level = level
        self.score = score
        self.window = window
        self.pool_size = pool_size
        self.prior_n = prior_n
        self.min_scores = min_scores
        self.adapt_gamma = adapt_gamma
        self.adapt_max = adapt_max
        self.name: str = inner.name
        self.version: str = f"{inner.version}+{VERSION}"
        self._reset()

    def _reset(self) -> None:
        nh = len(self.horizons_s)
        # per tenant: step, last index, pending forecasts, scores per horizon, q per horizon
        self._tenants: dict[str, dict[str, Any]] = {}
        self._pool: list[list[float]] = [[] for _ in range(nh)]
        self._pool_q: list[float | None] = [None] * nh
        self._pool_at: float | None = None
        self._levels: list[float] = [self.level] * nh

    # -- learning -------------------------------------------------------------------------
    def learn_one(self, window: Any) -> None:
        """Let the inner model learn ``window``; score the forecasts it matures; record the
        inner model's forecasts made at its end."""
        self.inner.learn_one(window)
        tenant = str(window.tenant)
        end = float(window.window_end)
        st = self._tenants.get(tenant)
        if st is None:
            st = self._tenants[tenant] = {
                "step": window_step_s(window, default=0.0) or None,
                "end": None,
                "pending": [],
                "scores": [[] for _ in self.horizons_s],
                "q": None,
            }
        if st["end"] is not None and end <= st["end"]:
            return  # late or repeated: the inner model ignores it too
        if st["step"] is None and st["end"] is not None:
            st["step"] = end - st["end"]
        st["end"] = end
        if st["step"] is None:
            return  # the window's length is known from the tenant's next window
        step = float(st["step"])
        idx = round(end / step)
        self._mature(st, idx, demand_of(window))
        if self._pool_at != end:
            self._refresh_pool()
            self._pool_at = end
        st["q"] = self._tenant_q(st)
        raw = self.inner.forecast(tenant, self.horizons_s)
        for i, h in enumerate(self.horizons_s):
            ahead = round(h / step)
            if ahead < 1:
                continue
            p50, p90 = raw[h]
            cal = self._apply(st["q"], i, p50, p90)
            st["pending"].append([idx + ahead, i, p50, p90, cal])

    def _mature(self, st: dict[str, Any], idx: int, y: float) -> None:
        keep = []
        target = 1.0 - self.level
        for item in st["pending"]:
            at, i, p50, p90, cal = item
            if at > idx:
                keep.append(item)
                continue
            if at < idx:
                continue  # its target window never arrived
            s = y - p50 if self.score == "residual" else y - p90
            scores: list[float] = st["scores"][i]
            scores.append(s)
            if len(scores) > self.window:
                del scores[0]
            pool = self._pool[i]
            pool.append(s)
            if len(pool) > self.pool_size:
                del pool[0]
            miss = 1.0 if y > cal + 1e-9 else 0.0
            lo, hi = self.level - self.adapt_max, min(self.level + self.adapt_max, 0.999)
            lvl = self._levels[i] + self.adapt_gamma * (miss - target)
            self._levels[i] = min(max(lvl, lo), hi)
        st["pending"] = keep

    def _refresh_pool(self) -> None:
        for i, pool in enumerate(self._pool):
            ok = len(pool) >= self.min_scores
            self._pool_q[i] = conformal_quantile(pool, self._levels[i]) if ok else None

    def _tenant_q(self, st: dict[str, Any]) -> list[float] | None:
        out = []
        for i, scores in enumerate(st["scores"]):
            pool_q = self._pool_q[i]
            n = len(scores)
            if pool_q is None:
                if n < self.min_scores:
                    return None
                out.append(conformal_quantile(scores, self._levels[i]))
                continue
            if n == 0:
                out.append(pool_q)
                continue
            own = conformal_quantile(scores, self._levels[i])
            out.append((n * own + self.prior_n * pool_q) / (n + self.prior_n))
        return out

    def _apply(self, q: list[float] | None, i: int, p50: float, p90: float) -> float:
        if q is None:
            return p90
        base = p50 if self.score == "residual" else p90
        return max(base + q[i], p50)

    # -- forecasting ----------------------------------------------------------------------
    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        """``{horizon_s: (p50, calibrated p90)}`` in GPUs (p50 is the inner model's)."""
        raw = self.inner.forecast(tenant, horizons)
        st = self._tenants.get(tenant)
        q = st["q"] if st is not None else None
        if q is None:
            return raw
        knots = [0.0, *self.horizons_s]
        values = [0.0, *q]
        out: dict[float, tuple[float, float]] = {}
        for h in horizons:
            p50, p90 = raw[h]
            hh = min(max(float(h), 0.0), knots[-1])
            qh = float(np.interp(hh, knots, values))
            base = p50 if self.score == "residual" else p90
            out[h] = (p50, max(base + qh, p50))
        return out

    def levels(self) -> dict[float, float]:
        """The adaptive working level per calibration horizon.

        >>> from dprobe.models.forecast.baselines import LastValue
        >>> Calibrated(LastValue(), horizons_s=(600.0,)).levels()
        {600.0: 0.9}
        """
        return dict(zip(self.horizons_s, self._levels, strict=True))

    def tenants(self) -> list[str]:
        """Tenants seen so far."""
        return sorted(self._tenants)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"inner": inner state, "calibration": plain data}`` (a copy)."""
        return {
            "inner": self.inner.state_dict(),
            "calibration": copy.deepcopy(
                {
                    "tenants": self._tenants,
                    "pool": self._pool,
                    "pool_q": self._pool_q,
                    "pool_at": self._pool_at,
                    "levels": self._levels,
                }
            ),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the state of an uncalibrated inner model
        (no ``"calibration"`` key) is loaded into it with calibration starting fresh."""
        if "calibration" not in state or "inner" not in state:
            self.inner.load_state_dict(state)
            self._reset()
            return
        cal = copy.deepcopy(state["calibration"])
        if len(cal["levels"]) != len(self.horizons_s):
            raise ValueError("calibration state does not fit horizons_s")
        self.inner.load_state_dict(state["inner"])
        self._tenants = {str(t): v for t, v in cal["tenants"].items()}
        self._pool = [[float(s) for s in p] for p in cal["pool"]]
        self._pool_q = [None if q is None else float(q) for q in cal["pool_q"]]
        self._pool_at = None if cal["pool_at"] is None else float(cal["pool_at"])
        self._levels = [float(v) for v in cal["levels"]]

    def __repr__(self) -> str:
        params = ", ".join(
            f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k != "inner"
        )
        return f"{type(self).__name__}({self.inner!r}, {params})"
