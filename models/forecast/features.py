"""Per-tenant demand history and the input features of the multi-task model.

:class:`TenantHistory` is a ring of the last windows of one tenant (indexed by window
number ``round(window_end / step)``, so missing windows are simply absent). From it,
:func:`origin_features` builds the model input at the newest window, scaled by the
tenant's typical demand so one global model fits VCs of any size:

- the last ``k_lags`` windows, each as ``(y[n-k] - y[n]) / scale`` (absent -> 0);
- the level ``y[n] / scale`` and ``log1p(y[n]) / 5`` (absolute size);
- pending share ``pending / demand`` and quota ratio ``demand / quota`` (+ a known flag);
- mean over 6 h and 24 h, min and max over 24 h, each minus ``y[n]``, over scale;
- per horizon: the demand one day before the target time minus ``y[n]`` (+ a flag);
- calendar: sin/cos of time of day, sin/cos of day of week, weekend flag.

``scale = max(mean demand of the history ring, 1 GPU)``; features are clipped to
``[-clip, clip]``. Every choice here is a design **assumption** of this implementation
(the paper only says "last K windows plus time features").

Example:
    >>> h = TenantHistory(step_s=600.0, length=150)
    >>> for n in range(1, 4):
    ...     h.add(n, float(8 * n), pending=0.0, quota=None)
    >>> h.value(2), h.value(7)
    (16.0, None)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DAY_S = 86_400.0
WEEK_DAYS = 7
EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday (Monday = 0)


@dataclass
class TenantHistory:
    """Ring of one tenant's recent demand: window number -> demand (plain arrays)."""

    step_s: float
    length: int
    idx: np.ndarray = field(init=False)
    val: np.ndarray = field(init=False)
    last_idx: int = -1
    last_pending: float = 0.0
    last_quota: float | None = None

    def __post_init__(self) -> None:
        self.idx = np.full(self.length, -1, dtype=np.int64)
        self.val = np.zeros(self.length, dtype=np.float64)

    def add(self, n: int, y: float, *, pending: float, quota: float | None) -> None:
        slot = n % self.length
        self.idx[slot] = n
        self.val[slot] = y
        if n >= self.last_idx:
            self.last_idx = n
            self.last_pending = pending
            self.last_quota = quota

    def value(self, n: int) -> float | None:
        """Demand of window ``n`` if it is still in the ring, else ``None``."""
        if n < 0:
            return None
        slot = n % self.length
        return float(self.val[slot]) if self.idx[slot] == n else None

    def since(self, n: int) -> np.ndarray:
        """Demands of the windows numbered ``> n`` still in the ring."""
        return self.val[self.idx > n]

    def to_state(self) -> dict[str, Any]:
        """The ring as plain data; ``idx`` and ``val`` are copies of its arrays (a caller
        that stores them turns them into what its format takes)."""
        return {
            "step_s": self.step_s,
            "length": self.length,
            "idx": self.idx.copy(),
            "val": self.val.copy(),
            "last_idx": self.last_idx,
            "last_pending": self.last_pending,
            "last_quota": self.last_quota,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TenantHistory:
        h = cls(step_s=float(state["step_s"]), length=int(state["length"]))
        h.idx = np.asarray(state["idx"], dtype=np.int64).copy()
        h.val = np.asarray(state["val"], dtype=np.float64).copy()
        h.last_idx = int(state["last_idx"])
        h.last_pending = float(state["last_pending"])
        q = state["last_quota"]
        h.last_quota = None if q is None else float(q)
        return h


def n_features(k_lags: int, n_horizons: int) -> int:
    """Length of the vector :func:`origin_features` returns."""
    return k_lags + 5 + 4 + 2 * n_horizons + 5


def scale_of(h: TenantHistory) -> float:
    """Typical demand of the tenant, at least 1 GPU: the mean of the windows within the
    ring's span of the newest one (a slot last written before a gap longer than the ring
    holds a value from long ago, and is left out).

    >>> h = TenantHistory(step_s=60.0, length=4)
    >>> for n, y in [(0, 40.0), (1, 40.0), (9, 2.0), (10, 4.0)]:
    ...     h.add(n, y, pending=0.0, quota=None)
    >>> scale_of(h)  # windows 0 and 1 are 9 windows old: not today's demand
    3.0
    """
    known = h.val[(h.idx >= 0) & (h.idx > h.last_idx - h.length)]
    return max(float(known.mean()) if known.size else 0.0, 1.0)


def calendar(ts: float, utc_offset_s: float = 0.0) -> list[float]:
    """sin/cos time of day, sin/cos day of week, weekend flag of epoch time ``ts``.

    >>> [round(v, 3) for v in calendar(6 * 3600.0)]
    [1.0, 0.0, 0.434, -0.901, 0.0]
    """
    t = ts + utc_offset_s
    tod = (t % DAY_S) / DAY_S
    dow = (math.floor(t / DAY_S) + EPOCH_WEEKDAY) % WEEK_DAYS
    return [
        math.sin(2 * math.pi * tod),
        math.cos(2 * math.pi * tod),
        math.sin(2 * math.pi * dow / WEEK_DAYS),
        math.cos(2 * math.pi * dow / WEEK_DAYS),
        1.0 if dow >= 5 else 0.0,
    ]


def origin_features(
    h: TenantHistory,
    *,
    k_lags: int,
    horizon_steps: Sequence[int],
    utc_offset_s: float = 0.0,
    clip: float = 10.0,
) -> tuple[np.ndarray, float, float]:
    """(features, demand now, scale) at the tenant's newest window (see module doc)."""
    n = h.last_idx
    y = h.value(n)
    y = 0.0 if y is None else y
    scale = scale_of(h)
    out: list[float] = []
    for k in range(1, k_lags + 1):
        past = h.value(n - k)
        out.append(0.0 if past is None else (past - y) / scale)
    quota = h.last_quota
    out += [
        y / scale,
        math.log1p(y) / 5.0,
        h.last_pending / max(y, 1.0),
        y / quota if quota else 0.0,
        1.0 if quota else 0.0,
    ]
    steps_6h = max(round(6 * 3600 / h.step_s), 1)
    steps_day = max(round(DAY_S / h.step_s), 1)
    recent = h.since(n - steps_6h)
    day = h.since(n - steps_day)
    out += [
        (float(recent.mean()) - y) / scale if recent.size else 0.0,
        (float(day.mean()) - y) / scale if day.size else 0.0,
        (float(day.min()) - y) / scale if day.size else 0.0,
        (float(day.max()) - y) / scale if day.size else 0.0,
    ]
    for hs in horizon_steps:
        back = h.value(n + hs - steps_day)
        out += [0.0, 0.0] if back is None else [(back - y) / scale, 1.0]
    out += calendar((n) * h.step_s, utc_offset_s)
    x = np.clip(np.asarray(out, dtype=np.float32), -clip, clip)
    return x, y, scale
