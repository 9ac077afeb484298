"""DProbe's job profiler: from model attributes and runtime metrics to a utilisation level.

DProbe (Zhou et al., Euro-Par 2024) integrates model attributes (family, batch size,
AMP, parameter count) with runtime hardware metrics (GPU util, SM util, GPU memory) to put
each instance on a level (L1/L2/L3/EX, :mod:`~dprobe.models.levels`). How it does so is
not public; this implementation (every rule below is an **assumption** and a setting):

1. **Runtime metrics win**: a running instance with live metrics is levelled from them
   (:func:`~dprobe.models.levels.classify`); its expected utilisation is what it shows.
2. **Known family** (the name matched case-insensitively, else the longest family
   whose name, letters and digits only, begins the job's: ``vgg16`` is ``VGG``,
   ``mobilenet_v2`` is ``MobileNetV2``): the expected GPU util and memory are interpolated over
   ``log2(batch size)`` between the family's profiles of the same precision (AMP or not;
   the other precision when that one was never profiled), clamped at the ends.
3. **Unseen family**: a regressor learned on every profile predicts util and
   ``log(memory)`` from the attributes ``log2(batch)``, ``amp``, ``log10(params_m)``:
   ``"ridge"`` (default; linear on standardised attributes, L2 ``ridge_alpha``, a
   missing attribute imputed with the table mean) or ``"knn"`` (distance-weighted
   ``k_neighbours``, dropping params when the job or the table has none). Ridge was
   chosen because it scored higher in the leave-one-family-out comparison
   (docs/profiler.md).
4. **Fallback** when nothing is known (no table, no batch size and no params):
   ``fallback_level`` (L2, the middle level, 0.5 GPU) with the table's median util and
   memory.

The level of an expectation uses the level thresholds with SM util = GPU util (profiles
rarely carry SM util: an assumption) and a device of ``gpu_mem_total_mb``.

Example:
    >>> from dprobe.models.profiles import shipped_profiles
    >>> prof = JobProfiler().fit(shipped_profiles())
    >>> prof.estimate(family="ResNet50", batch_size=64, amp=False).level
    'L3'
    >>> e = prof.estimate(family="NeuMF", batch_size=256, amp=True)
    >>> e.level, e.source
    ('L1', 'family')
    >>> prof.estimate(family="GPT-tiny", batch_size=16, amp=True, params_m=30).source
    'regressor'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dprobe.models.levels import LEVELS, Level, LevelSettings, check_metrics, classify
from dprobe.models.planner_damping import whole_number
from dprobe.models.profiles import Profile

MIB = 1 << 20
Source = Literal["runtime", "family", "regressor", "fallback"]


@dataclass(frozen=True, slots=True)
class JobEstimate:
    """Level and expected footprint of one instance, and where the estimate came from."""

    level: Level
    gpu_util_pct: float
    gpu_mem_mb: float
    source: Source


def _attrs(batch_size: float | None, amp: bool | None, params_m: float | None) -> list[float]:
    return [
        math.log2(batch_size) if batch_size else math.nan,
        1.0 if amp else 0.0,
        math.log10(params_m + 0.01) if params_m is not None else math.nan,
    ]


def _norm(name: str) -> str:
    """``"MobileNet_V2"`` -> ``"mobilenetv2"``."""
    return "".join(c for c in name.lower() if c.isalnum())


class JobProfiler:
    """Fitted from a profile table; see the module doc for the rules and assumptions."""

    def __init__(
        self,
        *,
        levels: LevelSettings | None = None,
        regressor: Literal["knn", "ridge"] = "ridge",
        k_neighbours: int = 3,
        ridge_alpha: float = 1.0,
        gpu_mem_total_mb: float = 32_768.0,
        fallback_level: Level = "L2",
    ) -> None:
        if regressor not in ("ridge", "knn"):  # any other would silently run kNN
            raise ValueError(f"regressor must be 'ridge' or 'knn', not {regressor!r}")
        # 2.5 failed at the first unseen family
        if not whole_number(k_neighbours) or k_neighbours < 1:
            raise ValueError(f"k_neighbours must be a whole number >= 1, not {k_neighbours!r}")
        if not (math.isfinite(ridge_alpha) and ridge_alpha >= 0):
            # NaN or infinity made every unseen family's util NaN (levelled L2); a negative
            # penalty is no ridge and fits a different model
            raise ValueError(f"ridge_alpha must be a finite number >= 0, not {ridge_alpha!r}")
        if not (math.isfinite(gpu_mem_total_mb) and gpu_mem_total_mb > 0):
            # 0, negative or NaN made the "memory >= share of the device" EX rule never hold
            raise ValueError(
                f"gpu_mem_total_mb must be a finite number > 0, not {gpu_mem_total_mb!r}"
            )
        if fallback_level not in LEVELS:
            raise ValueError(
                f"fallback_level must be one of {', '.join(LEVELS)}, not {fallback_level!r}"
            )
        self.levels = levels
        self.regressor = regressor
        self.k_neighbours = k_neighbours
        self.ridge_alpha = ridge_alpha
        self.gpu_mem_total_mb = gpu_mem_total_mb
        self.fallback_level = fallback_level
        self._settings = levels or LevelSettings()
        self._profiles: list[Profile] = []
        self._families: dict[str, list[Profile]] = {}
        self._x = np.zeros((0, 3))
        self._y = np.zeros((0, 2))
        self._mu = np.zeros(3)
        self._sd = np.ones(3)
        self._w = np.zeros((4, 2))

    def fit(self, profiles: Sequence[Profile]) -> JobProfiler:
        """Learn from ``profiles`` (replaces what was learned before); returns ``self``."""
        self._profiles = list(profiles)
        self._families = {}
        for p in self._profiles:
            self._families.setdefault(p.family.lower(), []).append(p)
        if not self._profiles:
            return self
        x = np.array([_attrs(p.batch_size, p.amp, p.params_m) for p in self._profiles])
        y = np.array([[p.gpu_util_pct, math.log(max(p.gpu_mem_mb, 1.0))] for p in self._profiles])
        known = ~np.isnan(x)
        count = known.sum(axis=0)
        filled = np.where(known, x, 0.0)
        self._mu = filled.sum(axis=0) / np.maximum(count, 1)
        var = (np.where(known, x - self._mu, 0.0) ** 2).sum(axis=0) / np.maximum(count, 1)
        self._sd = np.where(var > 0, np.sqrt(var), 1.0)
        self._x, self._y = x, y
        # ridge on standardised attributes, missing params imputed with the mean (-> 0)
        z = np.nan_to_num((x - self._mu) / self._sd)
        a = np.c_[np.ones(len(z)), z]
        reg = self.ridge_alpha * np.eye(a.shape[1])
        reg[0, 0] = 0.0
        self._w = np.linalg.solve(a.T @ a + reg, a.T @ y)
        return self

    # -- estimates ----------------------------------------------------------------------
    def estimate(
        self,
        *,
        family: str | None = None,
        batch_size: int | None = None,
        amp: bool | None = None,
        params_m: float | None = None,
    ) -> JobEstimate:
        """Level and expected footprint of a job from its attributes only (pending jobs).

        ``batch_size`` ``None`` or 0 and ``params_m`` ``None`` are unknown; a negative, NaN
        or infinite one is refused with a ``ValueError`` naming it.
        """
        # an infinite one overflowed the regressor (or gave a NaN footprint)
        if batch_size is not None and not (batch_size >= 0 and math.isfinite(batch_size)):
            raise ValueError(
                f"batch_size must be a finite number >= 1 (None or 0: unknown), not {batch_size!r}"
            )
        if params_m is not None and not (params_m >= 0 and math.isfinite(params_m)):
            raise ValueError(
                f"params_m must be a finite number >= 0 (None: unknown), not {params_m!r}"
            )
        rows = self._family_rows(family) if family else []
        if rows:
            util, mem = self._interpolate(rows, batch_size, amp)
            return self._make(util, mem, "family")
        if self._profiles and (batch_size or params_m is not None):
            util, mem = self._regress(_attrs(batch_size, amp, params_m))
            return self._make(util, mem, "regressor")
        return self._fallback()

    def profile(
        self,
        *,
        family: str | None = None,
        batch_size: int | None = None,
        amp: bool | None = None,
        params_m: float | None = None,
        gpu_util: float | None = None,
        sm_util: float | None = None,
        mem_used_bytes: float | None = None,
        mem_total_bytes: float = 0.0,
        exclusive: bool = False,
    ) -> JobEstimate:
        """Level of an instance: from live metrics when given, else from its attributes.

        A NaN or infinite metric is refused with a ``ValueError`` naming it.

        >>> JobProfiler().profile(gpu_util=10.0, mem_used_bytes=1e9).level
        'L1'
        """
        check_metrics(
            gpu_util=gpu_util,
            sm_util=sm_util,
            mem_used_bytes=mem_used_bytes,
            mem_total_bytes=mem_total_bytes,
        )
        if gpu_util is not None and mem_used_bytes is not None:
            level = classify(
                self._settings,
                gpu_util=gpu_util,
                sm_util=gpu_util if sm_util is None else sm_util,
                mem_used_bytes=mem_used_bytes,
                mem_total_bytes=mem_total_bytes,
                exclusive=exclusive,
            )
            return JobEstimate(level, float(gpu_util), mem_used_bytes / MIB, "runtime")
        est = self.estimate(family=family, batch_size=batch_size, amp=amp, params_m=params_m)
        if exclusive:
            return JobEstimate("EX", est.gpu_util_pct, est.gpu_mem_mb, est.source)
        return est

    # -- internals ----------------------------------------------------------------------
    def _family_rows(self, family: str) -> list[Profile]:
        rows = self._families.get(family.lower())
        if rows:
            return rows
        name = _norm(family)
        best = max(
            (f for f in self._families if name.startswith(_norm(f)) and _norm(f)),
            key=lambda f: len(_norm(f)),
            default=None,
        )
        return self._families[best] if best is not None else []

    def _make(self, util: float, mem_mb: float, source: Source) -> JobEstimate:
        util = min(max(util, 0.0), 100.0)
        level = classify(
            self._settings,
            gpu_util=util,
            sm_util=util,
            mem_used_bytes=mem_mb * MIB,
            mem_total_bytes=self.gpu_mem_total_mb * MIB,
        )
        return JobEstimate(level, util, mem_mb, source)

    def _fallback(self) -> JobEstimate:
        if self._profiles:
            util = float(np.median([p.gpu_util_pct for p in self._profiles]))
            mem = float(np.median([p.gpu_mem_mb for p in self._profiles]))
        else:
            util, mem = 50.0, 0.0
        return JobEstimate(self.fallback_level, util, mem, "fallback")

    def _interpolate(
        self, rows: list[Profile], batch_size: int | None, amp: bool | None
    ) -> tuple[float, float]:
        same = [r for r in rows if amp is None or r.amp == bool(amp)] or rows
        same = sorted(same, key=lambda r: r.batch_size)
        xs = [math.log2(r.batch_size) for r in same]
        utils = [r.gpu_util_pct for r in same]
        mems = [math.log(max(r.gpu_mem_mb, 1.0)) for r in same]
        if not batch_size:
            return float(np.mean(utils)), float(math.exp(np.mean(mems)))
        b = math.log2(batch_size)
        return float(np.interp(b, xs, utils)), float(math.exp(np.interp(b, xs, mems)))

    def _regress(self, attrs: list[float]) -> tuple[float, float]:
        q = np.asarray(attrs)
        if self.regressor == "ridge":
            z = np.nan_to_num((q - self._mu) / self._sd)
            util, log_mem = np.r_[1.0, z] @ self._w
            return float(util), float(math.exp(log_mem))
        # the job's attributes that some profile has too (a table without params_m: by
        # batch size and AMP alone, not compared with no row)
        dims = ~np.isnan(q) & ~np.isnan(self._x).all(axis=0)
        zq = (q[dims] - self._mu[dims]) / self._sd[dims]
        zx = (self._x[:, dims] - self._mu[dims]) / self._sd[dims]
        ok = ~np.isnan(zx).any(axis=1)
        zx, ys = zx[ok], self._y[ok]
        if not len(zx):
            fb = self._fallback()
            return fb.gpu_util_pct, fb.gpu_mem_mb
        d = np.sqrt(((zx - zq) ** 2).sum(axis=1))
        k = min(self.k_neighbours, len(d))
        near = np.argsort(d, kind="stable")[:k]
        w = 1.0 / (d[near] + 1e-3)
        util, log_mem = (ys[near] * w[:, None]).sum(axis=0) / w.sum()
        return float(util), float(math.exp(log_mem))
