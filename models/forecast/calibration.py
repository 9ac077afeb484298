"""Online calibration of any forecaster's p90: conformal-style, per tenant and horizon.

:class:`Calibrated` wraps a forecaster of the registry and keeps its contract
(``learn_one`` / ``forecast`` / ``state_dict`` / ``load_state_dict``). p50 is the inner
model's, untouched; p90 becomes ``p50 + a x spread + c x activity + b`` (never below
p50), where ``spread = inner p90 - p50``, ``activity`` is how much the tenant's demand
moved lately, and ``(a, c, b)`` are fitted online so that, over recent matured forecasts,
about ``level`` (0.9) of actual demands lie at or below it. How (every choice a setting):

- When the wrapper learns tenant ``t``'s window ending at ``T``, it asks the inner model
  for ``(p50, p90)`` at each calibration horizon ``h`` in ``horizons_s`` [600, 3600,
  21600 s] and keeps them. When ``t``'s window ending at ``T + h`` arrives, that forecast
  has *matured*: it keeps ``(y - p50, spread)``. Forecasts whose target window never
  arrives are dropped. Nothing is learned from a window before it has closed.
- For each spread weight ``a`` in ``spread_weights`` [0, 0.25, 0.5, 0.75, 1, 1.5, 2],
  ``b_a`` is the smallest shift whose p90 covers ``ceil(level' x (n + 1))`` of the
  tenant's last ``window`` [500] matured forecasts: split-conformal prediction with the
  score ``y - p50 - a x spread`` (``a = 0``: conformal residuals around p50; ``a = 1``:
  conformalised quantile regression, the inner p90 shifted), counting a forecast with
  ``y <= p50`` as covered whatever ``b`` is (p90 never goes below p50), which keeps a
  mostly flat tenant from being over-covered. The ``a`` kept is the one whose p90 had the
  lowest mean pinball loss at ``level`` on those forecasts, so the inner model's spread is
  used as far as it has paid off.
- A young tenant borrows: ``b_a`` and the losses are shrunk towards the same figures over
  the last ``pool_size`` [2000] matured forecasts of *all* tenants,
  ``(n x tenant + prior_n x pool) / (n + prior_n)`` with ``prior_n`` [50]. The pool's
  figures are refreshed once per window end. Until ``min_scores`` [20] forecasts have
  matured anywhere, p90 stays the inner one.
- Shifts: the window forgets; in addition the working level ``level'`` can adapt to
  misses (adaptive conformal inference, Gibbs & Candes, NeurIPS 2021), once per horizon
  for all tenants: every matured forecast moves it by ``adapt_gamma x (miss - (1 -
  level))`` [0: off], within ``level +- adapt_max`` [0.07].
- A requested horizon between calibrated ones gets ``a`` and ``b`` interpolated linearly
  (``b`` from 0 at horizon 0 below the first); beyond the last, the last ones. A
  calibration horizon shorter than the tenant's window is skipped.
- ``raw_fallback`` [off]: per tenant and horizon, keep the inner model's own p90 while,
  over the tenant's last ``window`` matured forecasts (shrunk towards all tenants' like
  the fit), the calibrated p90 it would have given lost more pinball loss than the inner
  one (an out-of-sample check, unlike the in-sample choice of ``a``). For an inner model
  whose own p90 already tracks its errors; validation found it mixed (docs/forecasting.md).

**Assumptions**: a tenant's scores are exchangeable over its last ``window`` matured
forecasts; other tenants' errors in GPUs are a fair prior for a young tenant; p90 is
affine in the inner model's spread and in the tenant's recent movement (demand that has
just moved tends to move again). State is plain data (lists, floats, dicts) plus the
inner model's own state, so checkpoints load with ``weights_only=True``.

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

from dprobe.models.forecast.base import Forecaster, forget
from dprobe.models.forecast.quantile_loss import pinball
from dprobe.models.forecast.target import demand_of, window_step_s

VERSION = "cal2"
STATE_VERSION = 2  # 1: before the activity term
ACTIVITY_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 4.0)
SPREAD_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


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


def fit_affine(
    resid: Sequence[float] | np.ndarray,
    spread: Sequence[float] | np.ndarray,
    weights: np.ndarray,
    level: float,
    target: float,
    *,
    activity: Sequence[float] | np.ndarray | None = None,
    activity_weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate: the smallest shift ``b`` whose p90 = ``p50 + max(shift + b, 0)``
    covers the ``ceil(level x (n + 1))`` forecasts conformal prediction asks for (a
    forecast with ``resid <= 0`` is covered by any p90, since p90 >= p50), and the mean
    pinball loss at ``target`` of that p90. The candidates are the spread weights ``a``
    (``shift = a x spread``) or, with ``activity``, every pair of ``a`` and an activity
    weight ``c`` (``shift = a x spread + c x activity``), ``a`` major.

    >>> b, loss = fit_affine([0.0, 0.0, 4.0, 0.0], [4.0] * 4, np.array([0.0, 1.0]), 0.75, 0.75)
    >>> b.tolist(), loss.tolist()
    ([4.0, 0.0], [0.75, 0.75])
    >>> fit_affine([0.0, 0.0, 4.0, 0.0], [4.0] * 4, np.array([0.0, 1.0]), 0.5, 0.5)[0].tolist()
    [0.0, -4.0]
    >>> fit_affine([0.0, 0.0, 4.0, 0.0], [0.0] * 4, np.array([0.0]), 0.75, 0.75,
    ...            activity=[0.0, 0.0, 2.0, 0.0], activity_weights=np.array([0.0, 2.0]))[0].tolist()
    [4.0, 0.0]
    """
    r = np.asarray(resid, dtype=float)
    s = np.asarray(spread, dtype=float)
    base = weights[:, None] * s[None, :]
    if activity is not None and activity_weights is not None:
        act = np.asarray(activity, dtype=float)
        extra = activity_weights[:, None] * act[None, :]
        base = (base[:, None, :] + extra[None, :, :]).reshape(-1, r.size)
    n = r.size
    up = r > 0
    k = min(math.ceil(level * (n + 1)), n) - int(n - up.sum())  # positive residuals to cover
    if k <= 0:  # p90 = p50 already covers enough
        b = 0.0 - (base.max(axis=1) if n else np.zeros(len(base)))
    else:
        z = r[up][None, :] - base[:, up]
        b = np.partition(z, k - 1, axis=1)[:, k - 1]
    # y - calibrated p90, and its pinball loss: target x d - min(d, 0)
    diff = base + b[:, None]
    np.maximum(diff, 0.0, out=diff)
    np.subtract(r[None, :], diff, out=diff)
    loss = target * diff.mean(axis=1) - np.minimum(diff, 0.0).mean(axis=1)
    return b, loss


class Calibrated:
    """``inner`` with its p90 calibrated online (see the module doc for the settings)."""

    def __init__(
        self,
        inner: Forecaster,
        *,
        horizons_s: Sequence[float] = (600.0, 3600.0, 21600.0),
        level: float = 0.9,
        spread_weights: Sequence[float] = SPREAD_WEIGHTS,
        activity_weights: Sequence[float] = ACTIVITY_WEIGHTS,
        activity_halflife: float = 1.0,
        window: int = 500,
        pool_size: int = 2000,
        prior_n: float = 50.0,
        min_scores: int = 20,
        adapt_gamma: float = 0.0,
        adapt_max: float = 0.07,
        raw_fallback: bool = False,
    ) -> None:
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be within (0, 1), got {level}")
        if not spread_weights or any(a < 0 for a in spread_weights):
            raise ValueError("spread_weights must be one or more weights >= 0")
        if not activity_weights or any(c < 0 for c in activity_weights):
            raise ValueError("activity_weights must be one or more weights >= 0")
        if not activity_halflife > 0:
            raise ValueError(f"activity_halflife must be > 0 windows, got {activity_halflife}")
        if window < 1 or pool_size < 1 or min_scores < 1 or prior_n < 0:
            raise ValueError("window, pool_size and min_scores must be >= 1, prior_n >= 0")
        if not horizons_s or any(h <= 0 for h in horizons_s):
            raise ValueError("horizons_s must be positive seconds")
        if adapt_gamma < 0 or adapt_max < 0:
            raise ValueError("adapt_gamma and adapt_max must be >= 0")
        self.inner = inner
        self.horizons_s = tuple(sorted(float(h) for h in horizons_s))
        self.level = level
        self.spread_weights = tuple(float(a) for a in spread_weights)
        self.activity_weights = tuple(float(c) for c in activity_weights)
        self.activity_halflife = float(activity_halflife)
        self.window = window
        self.pool_size = pool_size
        self.prior_n = prior_n
        self.min_scores = min_scores
        self.adapt_gamma = adapt_gamma
        self.adapt_max = adapt_max
        self.raw_fallback = raw_fallback
        self.name: str = inner.name
        self.version: str = f"{inner.version}+{VERSION}"
        self._weights = np.asarray(self.spread_weights, dtype=float)
        self._act_weights = np.asarray(self.activity_weights, dtype=float)
        # the (a, c) pair of each candidate, in fit_affine's order (a major)
        self._pairs = [(a, c) for a in self.spread_weights for c in self.activity_weights]
        self._act_alpha = 1.0 - 0.5 ** (1.0 / self.activity_halflife)
        self._reset()

    def _reset(self) -> None:
        nh = len(self.horizons_s)
        # per tenant: step, end, pending forecasts, matured scores per horizon, fit, per
        # horizon whether the inner p90 is kept (raw_fallback), and [last demand, activity]
        self._tenants: dict[str, dict[str, Any]] = {}
        # matured (resid, spread, edge, activity) arrays, oldest first; lists in state_dict
        self._pool: list[list[np.ndarray]] = [_empty_scores() for _ in range(nh)]
        self._pool_fit: list[list[list[float]] | None] = [None] * nh  # [b, loss] per candidate
        self._pool_edge: list[float | None] = [None] * nh  # mean edge of the calibrated p90
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
                "matured": [_empty_scores() for _ in self.horizons_s],
                "fit": None,
                "raw": None,
                "act": None,
            }
        if st["end"] is not None and end <= st["end"]:
            return  # late or repeated: the inner model ignores it too
        y = demand_of(window)
        prev = st["act"]  # [last demand, activity]; the first window has not moved
        act = 0.0 if prev is None else prev[1] + self._act_alpha * (abs(y - prev[0]) - prev[1])
        st["act"] = [y, act]
        if st["step"] is None and st["end"] is not None:
            st["step"] = end - st["end"]
        st["end"] = end
        if st["step"] is None:
            return  # the window's length is known from the tenant's next window
        step = float(st["step"])
        idx = round(end / step)
        self._mature(st, idx, y)
        if self._pool_at != end:
            self._refresh_pool()
            self._pool_at = end
        st["fit"] = self._tenant_fit(st)
        st["raw"] = self._raw_better(st) if self.raw_fallback else None
        raw = self.inner.forecast(tenant, self.horizons_s)
        for i, h in enumerate(self.horizons_s):
            ahead = round(h / step)
            if ahead < 1:
                continue
            p50, p90 = raw[h]
            cal = p90 if st["fit"] is None else _affine(st["fit"][i], p50, p90, act)
            st["pending"].append([idx + ahead, i, p50, p90, cal, act])

    def _mature(self, st: dict[str, Any], idx: int, y: float) -> None:
        keep = []
        for item in st["pending"]:
            at, i, p50, p90, cal, act = item
            if at > idx:
                keep.append(item)
                continue
            if at < idx:
                continue  # its target window never arrived
            # what the calibrated p90 lost beyond the inner one (< 0: it paid)
            edge = (
                pinball(y - cal, self.level) - pinball(y - p90, self.level)
                if self.raw_fallback
                else None
            )
            for sc, cap in ((st["matured"][i], self.window), (self._pool[i], self.pool_size)):
                sc[0] = np.append(sc[0], y - p50)[-cap:]
                sc[1] = np.append(sc[1], max(p90 - p50, 0.0))[-cap:]
                if edge is not None:
                    sc[2] = np.append(sc[2], edge)[-cap:]
                sc[3] = np.append(sc[3], act)[-cap:]
            if self.adapt_gamma > 0:
                miss = 1.0 if y > cal + 1e-9 else 0.0
                lo, hi = self.level - self.adapt_max, min(self.level + self.adapt_max, 0.999)
                lvl = self._levels[i] + self.adapt_gamma * (miss - (1.0 - self.level))
                self._levels[i] = min(max(lvl, lo), hi)
        st["pending"] = keep

    def _refresh_pool(self) -> None:
        for i, (resid, spread, edge, act) in enumerate(self._pool):
            if len(resid) < self.min_scores:
                self._pool_fit[i] = None
                self._pool_edge[i] = None
                continue
            b, loss = self._fit(resid, spread, act, i)
            self._pool_fit[i] = [b.tolist(), loss.tolist()]
            self._pool_edge[i] = float(edge.mean()) if edge.size else None

    def _fit(
        self, resid: np.ndarray, spread: np.ndarray, act: np.ndarray, i: int
    ) -> tuple[np.ndarray, np.ndarray]:
        return fit_affine(
            resid,
            spread,
            self._weights,
            self._levels[i],
            self.level,
            activity=act,
            activity_weights=self._act_weights,
        )

    def _tenant_fit(self, st: dict[str, Any]) -> list[list[float]] | None:
        """Per horizon ``[a, b, c]``, or None while there is nothing to calibrate with."""
        out = []
        step = st.get("step")
        for i, (resid, spread, _, act) in enumerate(st["matured"]):
            if step and round(self.horizons_s[i] / step) < 1:
                out.append([1.0, 0.0, 0.0])  # shorter than a window: never scored, as is
                continue
            pool = self._pool_fit[i]
            n = len(resid)
            if pool is None and n < self.min_scores:
                return None
            if pool is None:
                b, loss = self._fit(resid, spread, act, i)
            elif n == 0:
                b, loss = np.asarray(pool[0]), np.asarray(pool[1])
            else:
                own_b, own_loss = self._fit(resid, spread, act, i)
                k = self.prior_n
                b = (n * own_b + k * np.asarray(pool[0])) / (n + k)
                loss = (n * own_loss + k * np.asarray(pool[1])) / (n + k)
            # the first (smallest a, then c) of the candidates that tie for the lowest loss,
            # whatever rounding the arithmetic left
            j = int(np.flatnonzero(loss <= loss.min() + 1e-9)[0])
            a, c = self._pairs[j]
            out.append([a, float(b[j]), c])
        return out

    def _raw_better(self, st: dict[str, Any]) -> list[bool] | None:
        """Per horizon, whether the inner p90 lost less than the calibrated one over the
        tenant's matured forecasts (shrunk towards all tenants' like the fit)."""
        if st["fit"] is None:
            return None
        out = []
        for i, (_, _, edge, _) in enumerate(st["matured"]):
            n, pool = len(edge), self._pool_edge[i]
            own = float(edge.mean()) if n else 0.0
            mean = own if pool is None else (n * own + self.prior_n * pool) / (n + self.prior_n)
            out.append(mean > 0.0)
        return out

    # -- forecasting ----------------------------------------------------------------------
    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        """``{horizon_s: (p50, calibrated p90)}`` in GPUs (p50 is the inner model's)."""
        raw = self.inner.forecast(tenant, horizons)
        st = self._tenants.get(tenant)
        if st is None or st["fit"] is None:
            return raw
        fit = st["fit"]
        if st["raw"]:
            fit = [[1.0, 0.0, 0.0] if keep else f for f, keep in zip(fit, st["raw"], strict=True)]
        act = st["act"][1] if st["act"] else 0.0
        knots = [0.0, *self.horizons_s]
        a_at = [fit[0][0], *(f[0] for f in fit)]
        b_at = [0.0, *(f[1] for f in fit)]
        c_at = [fit[0][2], *(f[2] for f in fit)]
        out: dict[float, tuple[float, float]] = {}
        for h in horizons:
            p50, p90 = raw[h]
            hh = min(max(float(h), 0.0), knots[-1])
            abc = [float(np.interp(hh, knots, at)) for at in (a_at, b_at, c_at)]
            out[h] = (p50, _affine(abc, p50, p90, act))
        return out

    def fitted(self, tenant: str) -> dict[float, dict[str, float]]:
        """Per calibration horizon, the spread weight ``a``, shift ``b`` and activity weight
        ``c`` in use for ``tenant`` (empty while its p90 is the inner model's).

        >>> from dprobe.models.forecast.baselines import LastValue
        >>> Calibrated(LastValue()).fitted("unseen")
        {}
        """
        st = self._tenants.get(tenant)
        if st is None or st["fit"] is None:
            return {}
        fits = (dict(zip("abc", f, strict=True)) for f in st["fit"])
        return dict(zip(self.horizons_s, fits, strict=True))

    def activity(self, tenant: str) -> float:
        """``tenant``'s recent movement of demand in GPUs (0 before its second window).

        >>> from types import SimpleNamespace as W
        >>> from dprobe.models.forecast.baselines import LastValue
        >>> m = Calibrated(LastValue(), activity_halflife=1.0)
        >>> for i, y in enumerate([4.0, 8.0, 8.0]):
        ...     m.learn_one(W(tenant="a", window_start=600.0 * i, window_end=600.0 * (i + 1),
        ...                   running_gpus=y, pending_gpus=0.0))
        >>> m.activity("a")  # a move of 4 GPUs weighs 0.5 x 4 at once, then halves
        1.0
        """
        st = self._tenants.get(tenant)
        return float(st["act"][1]) if st is not None and st["act"] else 0.0

    def levels(self) -> dict[float, float]:
        """The working level per calibration horizon (moves only with ``adapt_gamma > 0``).

        >>> from dprobe.models.forecast.baselines import LastValue
        >>> Calibrated(LastValue(), horizons_s=(600.0,)).levels()
        {600.0: 0.9}
        """
        return dict(zip(self.horizons_s, self._levels, strict=True))

    def forget(self, tenant: str) -> None:
        """Drop ``tenant``'s matured and pending forecasts here and its state in the inner
        model (where it can); the pool of all tenants' scores stays."""
        self._tenants.pop(tenant, None)
        forget(self.inner, tenant)

    def tenants(self) -> list[str]:
        """Tenants seen so far."""
        return sorted(self._tenants)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"inner": inner state, "calibration": plain data}`` (a copy)."""
        tenants = {
            t: {**{k: v for k, v in st.items() if k != "matured"}, "matured": _lists(st["matured"])}
            for t, st in self._tenants.items()
        }
        return {
            "inner": self.inner.state_dict(),
            "calibration": copy.deepcopy(
                {
                    "tenants": tenants,
                    "pool": _lists(self._pool),
                    "pool_fit": self._pool_fit,
                    "pool_edge": self._pool_edge,
                    "pool_at": self._pool_at,
                    "levels": self._levels,
                    "horizons_s": [float(h) for h in self.horizons_s],
                    "version": STATE_VERSION,
                }
            ),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the state of an uncalibrated inner model
        (no ``"calibration"`` key) is loaded into it with calibration starting fresh. A
        state written before the activity term keeps its scores and fits (their activity
        counts as 0); all tenants' fit is redone at the next window end."""
        if "calibration" not in state or "inner" not in state:
            self.inner.load_state_dict(state)
            self._reset()
            return
        cal = copy.deepcopy(state["calibration"])
        saved = cal.get("horizons_s")
        if saved is not None and [float(h) for h in saved] != [float(h) for h in self.horizons_s]:
            # calibrated for other horizons (the planning lead changed): what the inner
            # model learned still holds; the calibration starts again for these horizons
            self.inner.load_state_dict(state["inner"])
            self._reset()
            return
        if len(cal["levels"]) != len(self.horizons_s):
            raise ValueError("calibration state does not fit horizons_s")
        old = cal.get("version", 1) < STATE_VERSION
        size = len(self.spread_weights) if old else len(self._pairs)
        if any(f is not None and len(f[0]) != size for f in cal["pool_fit"]):
            raise ValueError("calibration state does not fit spread_weights/activity_weights")
        self.inner.load_state_dict(state["inner"])
        self._tenants = {
            str(t): {
                "raw": None,
                "act": None,
                **v,
                "matured": _arrays(v["matured"]),
                "pending": [[*p, 0.0][:6] for p in v["pending"]],
                # a fit written before the activity term is [a, b]: c = 0
                "fit": None if v["fit"] is None else [[*f, 0.0][:3] for f in v["fit"]],
            }
            for t, v in cal["tenants"].items()
        }
        self._pool = _arrays(cal["pool"])
        self._pool_fit = [None] * len(self.horizons_s) if old else cal["pool_fit"]
        self._pool_edge = cal.get("pool_edge", [None] * len(self.horizons_s))
        self._pool_at = None if cal["pool_at"] is None else float(cal["pool_at"])
        self._levels = [float(v) for v in cal["levels"]]

    def __repr__(self) -> str:
        params = ", ".join(
            f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k != "inner"
        )
        return f"{type(self).__name__}({self.inner!r}, {params})"


def _affine(abc: Sequence[float], p50: float, p90: float, activity: float) -> float:
    """``p50 + max(a x (p90 - p50) + c x activity + b, 0)`` for ``abc = (a, b, c)``."""
    a, b, c = abc
    return p50 + max(a * max(p90 - p50, 0.0) + c * activity + b, 0.0)


def _empty_scores() -> list[np.ndarray]:
    """Matured scores of one horizon: residual ``y - p50``, inner spread, the edge (kept
    only with ``raw_fallback``) and the activity when the forecast was made."""
    return [np.empty(0), np.empty(0), np.empty(0), np.empty(0)]


def _lists(scores: list[list[np.ndarray]]) -> list[list[list[float]]]:
    return [[a.tolist() for a in sc] for sc in scores]


def _arrays(scores: list[list[Sequence[float]]]) -> list[list[np.ndarray]]:
    """Back to arrays; a state written before the edge or the activity was kept gets an
    empty edge and an activity of 0 for each score."""
    out = []
    for sc in scores:
        arr = [np.asarray(a, dtype=float) for a in sc]
        edge = arr[2] if len(arr) > 2 else np.empty(0)
        act = arr[3] if len(arr) > 3 else np.zeros(arr[0].size)
        out.append([arr[0], arr[1], edge, act])
    return out
