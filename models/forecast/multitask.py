"""DProbe's multi-task trend predictor: one global MMoE for all tenants, trained online.

As described for DProbe (Zhou et al., Euro-Par 2024) and implemented here:

- **one model for every tenant**, with a tenant embedding; a tenant seen for the first
  time gets a slot initialised from the *generic* embedding (slot 0, trained by replacing
  a row's tenant with slot 0 with probability ``embed_dropout``), so it is not cold;
- input: the last ``k_lags`` windows plus multi-scale and calendar features
  (:mod:`~dprobe.models.forecast.features`), scaled by the tenant's typical demand;
- tasks: the demand at each of ``horizons_s`` (p50 and p90 of the change from now, by
  quantile loss) and the trend direction at each horizon (down / flat / up, flat = within
  ``trend_band`` of the tenant's scale), sharing experts through one gate per task
  (:class:`~dprobe.models.forecast.mmoe_net.MMoENet`); with ``gate_changes`` the trend
  task decides whether p50 moves at all (see :meth:`MultiTaskForecaster.forecast`);
- **online combination** (``combine``): per horizon, p50's change from now is
  ``a * (the network's gated change) + b * (the step inside the newest window)``, with
  ``(a, b)`` picked from ``combine_model_weights`` x ``combine_step_weights`` as the pair
  with the lowest recent absolute error over forecasts whose target window has closed
  (exponentially forgotten, ``combine_halflife`` forecasts); ``a`` shrinks the network's
  change towards "same as now" where it has not paid off, ``b`` continues a change that
  began inside the newest window (see :func:`window_step`);
- **online training**: every closed window adds the row whose longest horizon has just
  passed to a FIFO replay buffer; every ``train_every`` new rows the model takes
  ``steps_per_train`` Adam steps on random batches of ``batch_size`` rows; forecasts use
  an exponential moving average of the weights (``ema_decay``);
- **job-aware inputs** (``job_inputs``, off by default; registered as
  ``dprobe-mmoe-jobs``): where windows carry the tenant's job flow, the inputs also hold
  what :class:`~dprobe.models.forecast.job_aware.JobAware` (learned alongside) expects at
  each horizon: its p50's change from now and its p90's spread, scaled, and a flag that
  a flow was there (all 0 without one). Off by default because it has not paid on
  validation (docs/forecasting.md, "Job-aware forecasting");
- warm start: :meth:`state_dict` / :meth:`load_state_dict` (weights, optimizer, buffer,
  histories, random state), saved with :func:`save_checkpoint`.

The target is :func:`~dprobe.models.forecast.target.demand_of` (running + pending GPUs).
A horizon between two trained horizons is interpolated linearly (from "now" below the
first); beyond the last, the last is used. Every size, rate and band here is an
**assumption** (the paper does not publish them) and a constructor setting; the defaults
were chosen on validation spans of Helios Earth before its test days (docs/forecasting.md).

Example:
    >>> from types import SimpleNamespace as W
    >>> m = MultiTaskForecaster(horizons_s=(600, 3600), seed=1)
    >>> for i in range(30):
    ...     m.learn_one(W(tenant="vc-a", window_start=600.0 * i, window_end=600.0 * (i + 1),
    ...                   running_gpus=16.0, pending_gpus=0.0, quota_gpus=32.0))
    >>> p50, p90 = m.forecast("vc-a", [3600])[3600]
    >>> p50 <= p90
    True
"""

from __future__ import annotations

import copy
import inspect
import itertools
import zlib
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dprobe.models.checkpoint import CheckpointError, first_line, load_state, save_state
from dprobe.models.forecast.features import TenantHistory, n_features, origin_features
from dprobe.models.forecast.job_aware import JobAware, job_features, n_job_features
from dprobe.models.forecast.mmoe_net import N_TREND_CLASSES, MMoENet, pinball
from dprobe.models.forecast.replay import ReplayBuffer
from dprobe.models.forecast.target import demand_of, first_windows, gpus_or_zero

MMOE_JOBS = "dprobe-mmoe-jobs"  # the name of the model with job-aware inputs
DAY_S = 86_400.0
IGNORE = -100  # cross-entropy ignore index (a target that never arrived)

# one origin of a tenant: (window number, features, demand, scale, network outputs
# [quantiles H x 2, trend probabilities H x 3] at the time the window closed, window step)
Origin = tuple[int, np.ndarray, float, float, np.ndarray, float]


def _whole(v: float) -> bool:
    return abs(v - round(v)) <= 1e-6 * max(1.0, abs(v))


def window_step(now: float, before: float | None, scale: float) -> float:
    """Scaled change of the newest window if a step happened *inside* it, else 0.

    GPU counts are whole numbers, so a window whose mean demand is not whole, after one
    whose mean is, contains a change of level: part of the window ran at the old level,
    part at the new one, and the level at the window's end lies beyond its mean. The
    change from the window before, ``(now - before) / scale``, is then a candidate for
    the change still to come (**assumption**: demand is sampled in whole GPUs; a series
    whose windows are never whole gives 0 here, and the combination learns nothing from it).

    >>> window_step(13.5, 10.0, 10.0), window_step(13.0, 10.0, 10.0), window_step(13.5, None, 1.0)
    (0.35, 0.0, 0.0)
    """
    if before is None or _whole(now) or not _whole(before):
        return 0.0
    return (now - before) / scale


class MultiTaskForecaster:
    """The DProbe multi-task MMoE predictor behind the Forecaster contract (see module doc)."""

    name = "dprobe-mmoe"
    version = "2"

    def __init__(
        self,
        *,
        horizons_s: Sequence[float] = (600.0, 3600.0, 21600.0),
        k_lags: int = 12,
        trend_band: float = 0.05,
        gate_changes: bool = True,
        gate_threshold: float = 0.55,
        max_tenants: int = 256,
        embed_dim: int = 8,
        n_experts: int = 3,
        expert_hidden: int = 32,
        expert_out: int = 16,
        tower_hidden: int = 16,
        lr: float = 5e-4,
        weight_decay: float = 1e-5,
        batch_size: int = 256,
        buffer_size: int = 50_000,
        train_every: int = 16,
        steps_per_train: int = 1,
        min_rows: int = 256,
        embed_dropout: float = 0.1,
        trend_weight: float = 0.2,
        scale_weighted_loss: bool = False,
        ema_decay: float = 0.99,
        combine: bool = True,
        combine_model_weights: Sequence[float] = (1.0, 0.75, 0.5, 0.25, 0.0),
        combine_step_weights: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6),
        combine_halflife: float = 5000.0,
        combine_min_rows: int = 200,
        combine_penalty: float = 0.01,
        job_inputs: bool = False,
        utc_offset_s: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.horizons_s = horizons_s
        self.k_lags = k_lags
        self.trend_band = trend_band
        self.gate_changes = gate_changes
        self.gate_threshold = gate_threshold
        self.max_tenants = max_tenants
        self.embed_dim = embed_dim
        self.n_experts = n_experts
        self.expert_hidden = expert_hidden
        self.expert_out = expert_out
        self.tower_hidden = tower_hidden
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.buffer_size = buffer_size
        self.train_every = train_every
        self.steps_per_train = steps_per_train
        self.min_rows = min_rows
        self.embed_dropout = embed_dropout
        self.trend_weight = trend_weight
        self.scale_weighted_loss = scale_weighted_loss
        self.ema_decay = ema_decay
        self.combine = combine
        self.combine_model_weights = combine_model_weights
        self.combine_step_weights = combine_step_weights
        self.combine_halflife = combine_halflife
        self.combine_min_rows = combine_min_rows
        self.combine_penalty = combine_penalty
        self.job_inputs = job_inputs
        if job_inputs:  # another model, with more inputs: it says so in tables and events
            self.name = MMOE_JOBS
        self.utc_offset_s = utc_offset_s
        self.seed = seed
        self._horizons = tuple(float(h) for h in horizons_s)
        if not self._horizons or any(h <= 0 for h in self._horizons):
            raise ValueError("horizons_s must be positive seconds")
        if list(self._horizons) != sorted(self._horizons):
            raise ValueError("horizons_s must be increasing")
        # the pairs (weight of the network's change, weight of the window step); the first
        # pair is what the combination starts from and prefers (see _choice)
        self._grid = np.array(
            list(itertools.product(combine_model_weights, combine_step_weights)), dtype=np.float64
        )
        if not len(self._grid):
            raise ValueError("combine_model_weights and combine_step_weights must not be empty")
        if not combine_halflife > 0:
            raise ValueError("combine_halflife must be > 0")
        torch.set_num_threads(1)
        self._reset()

    # -- construction -------------------------------------------------------------------
    def _reset(self) -> None:
        self._n_feat = n_features(self.k_lags, len(self._horizons))
        self._jobs: JobAware | None = None
        if self.job_inputs:
            self._jobs = JobAware()
            self._n_feat += n_job_features(len(self._horizons))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self._net = MMoENet(
                n_features=self._n_feat,
                n_horizons=len(self._horizons),
                n_tenant_slots=self.max_tenants + 1,
                embed_dim=self.embed_dim,
                n_experts=self.n_experts,
                expert_hidden=self.expert_hidden,
                expert_out=self.expert_out,
                tower_hidden=self.tower_hidden,
            )
        self._ema = copy.deepcopy(self._net)  # the averaged weights that forecast
        self._ema.requires_grad_(False)
        self._ema.eval()  # no dropout or batch norm: the mode never changes afterwards
        self._opt = torch.optim.Adam(
            self._net.parameters(), lr=self.lr, weight_decay=self.weight_decay
        )
        self._rng = np.random.default_rng(self.seed)
        self._buffer = ReplayBuffer(self.buffer_size, self._n_feat, len(self._horizons))
        self._hist: dict[str, TenantHistory] = {}
        self._origins: dict[str, deque[Origin]] = {}
        self._slots: dict[str, int] = {}
        self._free: list[int] | None = None  # slots no tenant holds, highest first (cache)
        self._waiting: dict[str, list[float]] = {}  # first windows of unknown length
        self._new_rows = 0
        self._steps = 0
        # per horizon: forgotten sums of each pair's absolute error (GPUs), and of counts
        self._comb_err = np.zeros((len(self._horizons), len(self._grid)), dtype=np.float64)
        self._comb_n = np.zeros(len(self._horizons), dtype=np.float64)
        self._chosen: np.ndarray | None = None  # _choice() until the next scoring

    def _steps_of(self, step_s: float) -> list[int]:
        return [max(round(h / step_s), 1) for h in self._horizons]

    def _prototype_history(self, step_s: float) -> TenantHistory:
        steps = self._steps_of(step_s)
        length = max(round(DAY_S / step_s), max(steps) + self.k_lags) + 2
        return TenantHistory(step_s=step_s, length=length)

    def _slot(self, tenant: str) -> int:
        """The tenant's embedding slot: for a new tenant the lowest slot no tenant holds
        (started from the generic embedding), or, with every slot held, one shared by a
        stable hash (assumption)."""
        slot = self._slots.get(tenant)
        if slot is None:
            if self._free is None:
                held = set(self._slots.values())
                self._free = [i for i in range(self.max_tenants, 0, -1) if i not in held]
            if self._free:
                slot = self._free.pop()
                with torch.no_grad():  # a new tenant starts from the generic embedding
                    self._net.embed.weight[slot] = self._net.embed.weight[0]
                    self._ema.embed.weight[slot] = self._ema.embed.weight[0]
            else:
                slot = zlib.crc32(tenant.encode()) % self.max_tenants + 1
            self._slots[tenant] = slot
        return slot

    # -- the contract -------------------------------------------------------------------
    def learn_one(self, window: Any) -> None:
        """Add one closed window; label matured rows; train every ``train_every`` rows."""
        if self._jobs is not None:
            self._jobs.learn_one(window)
        tenant = str(window.tenant)
        hist = self._hist.get(tenant)
        if hist is None:
            first = first_windows(self._waiting, window)
            if first is None:
                return
            step, windows = first
            hist = self._hist[tenant] = self._prototype_history(step)
            self._origins[tenant] = deque()
            self._slot(tenant)
            for w in windows:
                self._learn(tenant, hist, w)
            return
        self._learn(tenant, hist, window)

    def _learn(self, tenant: str, hist: TenantHistory, window: Any) -> None:
        n = round(float(window.window_end) / hist.step_s)
        if n <= hist.last_idx:
            return  # late or repeated window: ignored
        quota = gpus_or_zero(getattr(window, "quota_gpus", None)) or None
        demand = demand_of(window)
        # a NaN input would reach the network and, through training, every tenant's model
        hist.add(n, demand, pending=gpus_or_zero(window.pending_gpus), quota=quota)
        steps = self._steps_of(hist.step_s)
        x, y, scale = origin_features(
            hist, k_lags=self.k_lags, horizon_steps=steps, utc_offset_s=self.utc_offset_s
        )
        if self._jobs is not None:
            x = np.concatenate([x, job_features(self._jobs, window, self._horizons, y, scale)])
        origins = self._origins[tenant]
        self._score_matured(origins, steps, n, demand)
        while origins and origins[0][0] + max(steps) <= n:
            self._label(tenant, hist, steps, origins.popleft())
        if self._new_rows >= self.train_every and len(self._buffer) >= self.min_rows:
            self._new_rows = 0
            for _ in range(self.steps_per_train):
                self._train_step()
        # the forecast from this window is made once, now, with the weights as they are
        step = window_step(y, hist.value(n - 1), scale)
        origins.append((n, x, y, scale, self._forward(x, self._slots[tenant]), step))

    def _forward(self, x: np.ndarray, slot: int) -> np.ndarray:
        """Network outputs for one origin: quantiles [H x 2] then trend probabilities [H x 3]."""
        with torch.no_grad():
            q, logits = self._ema(torch.from_numpy(x).unsqueeze(0), torch.tensor([slot]))
        return np.concatenate(
            [q[0].numpy().ravel(), torch.softmax(logits[0], dim=1).numpy().ravel()]
        )

    def _gated(self, packed: np.ndarray) -> np.ndarray:
        """The network's scaled p50 change per horizon, after the trend gate."""
        nh = len(self._horizons)
        z50 = packed[0 : 2 * nh : 2].astype(np.float64)
        if self.gate_changes:
            probs = packed[2 * nh :].reshape(nh, 3)
            z50[np.maximum(probs[:, 0], probs[:, 2]) < self.gate_threshold] = 0.0
        return z50

    def _score_matured(self, origins: deque[Origin], steps: list[int], n: int, now: float) -> None:
        """Charge every combination pair its error on the forecasts whose target is window n."""
        if not self.combine:
            return
        decay = 0.5 ** (1.0 / self.combine_halflife)
        for i, s in enumerate(steps):
            origin = self._origin_at(origins, n - s)
            if origin is None:
                continue
            _, _, y0, scale, packed, step = origin
            change = self._grid[:, 0] * self._gated(packed)[i] + self._grid[:, 1] * step
            err = np.abs(np.maximum(y0 + scale * change, 0.0) - now)
            self._comb_err[i] *= decay
            self._comb_err[i] += err
            self._comb_n[i] = self._comb_n[i] * decay + 1.0
        self._chosen = None

    @staticmethod
    def _origin_at(origins: deque[Origin], o: int) -> Origin | None:
        j = len(origins) - (origins[-1][0] - o) - 1 if origins else -1
        if 0 <= j < len(origins) and origins[j][0] == o:  # no window missing in between
            return origins[j]
        return next((e for e in origins if e[0] == o), None)

    def _choice(self) -> np.ndarray:
        """Per horizon, the index of the pair in use (the first until ``combine_min_rows``).

        The pair with the lowest mean recent error wins; moving the network's weight away
        from the first one costs ``combine_penalty`` x (the first pair's error) per unit
        of weight, a prior that keeps the trained output unless shrinking it clearly pays.
        """
        if self._chosen is not None:
            return self._chosen
        out = np.zeros(len(self._horizons), dtype=np.int64)
        if self.combine:
            dev = np.abs(self._grid[:, 0] - self._grid[0, 0])
            for i, cnt in enumerate(self._comb_n):
                if cnt >= self.combine_min_rows:
                    mean = self._comb_err[i] / cnt
                    out[i] = int(np.argmin(mean + self.combine_penalty * mean[0] * dev))
        self._chosen = out
        return out

    def _label(
        self,
        tenant: str,
        hist: TenantHistory,
        steps: list[int],
        origin: Origin,
    ) -> None:
        """Turn a matured origin ``(window, features, demand, scale, ...)`` into a buffer row."""
        o, x, y0, scale = origin[:4]
        targets = np.zeros(len(steps), dtype=np.float32)
        mask = np.zeros(len(steps), dtype=np.float32)
        for i, s in enumerate(steps):
            v = hist.value(o + s)
            if v is not None:
                targets[i], mask[i] = (v - y0) / scale, 1.0
        if not mask.any():
            return
        weight = scale if self.scale_weighted_loss else 1.0
        self._buffer.add(x, self._slots[tenant], targets, mask, weight)
        self._new_rows += 1

    def _train_step(self) -> None:
        batch = self._buffer.sample(self._rng, self.batch_size)
        drop = torch.from_numpy(self._rng.random(self.batch_size) < self.embed_dropout)
        tenant = torch.where(drop, torch.zeros_like(batch["tenant"]), batch["tenant"])
        quants, trend_logits = self._net(batch["x"], tenant)
        w = batch["weight"] / batch["weight"].mean().clamp(min=1e-9)
        mw = batch["mask"] * w.unsqueeze(1)
        loss = pinball(quants[:, :, 0], batch["y"], 0.5, mw) + pinball(
            quants[:, :, 1], batch["y"], 0.9, mw
        )
        # trend classes from the same targets: down / flat / up around +-trend_band
        trend = 1 + (batch["y"] > self.trend_band).long() - (batch["y"] < -self.trend_band).long()
        trend = torch.where(batch["mask"] > 0, trend, torch.full_like(trend, IGNORE))
        ce = torch.nn.functional.cross_entropy(
            trend_logits.reshape(-1, N_TREND_CLASSES),
            trend.reshape(-1),
            ignore_index=IGNORE,
            reduction="none",
        ).view_as(mw)
        loss = loss + self.trend_weight * (ce * mw).sum() / mw.sum().clamp(min=1.0)
        self._opt.zero_grad(set_to_none=True)
        loss.backward()
        self._opt.step()
        with torch.no_grad():
            d = self.ema_decay if self._steps > 0 else 0.0
            for pe, p in zip(self._ema.parameters(), self._net.parameters(), strict=True):
                pe.mul_(d).add_(p, alpha=1.0 - d)
        self._steps += 1

    def _predict(self, tenant: str) -> tuple[np.ndarray, np.ndarray, float, float, float]:
        """(scaled quantiles [H, 2], trend probabilities [H, 3], demand now, scale, step)."""
        _, _, y, scale, packed, step = self._origins[tenant][-1]  # made when it closed
        nh = len(self._horizons)
        return packed[: 2 * nh].reshape(nh, 2), packed[2 * nh :].reshape(nh, 3), y, scale, step

    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        """``{horizon_s: (p50, p90)}`` in GPUs; an unseen tenant gets ``(0.0, 0.0)``.

        With ``gate_changes``, a horizon whose trend head gives neither "down" nor "up" a
        probability of at least ``gate_threshold`` keeps the network's p50 change at 0: the
        median of a change that is more often than not "flat" is no change (0.5 is the
        median's own definition; a higher threshold leaves a margin for miscalibration).
        With ``combine``, p50's change is then ``a * that change + b * window step`` with
        the pair ``(a, b)`` that has had the lowest recent error (:meth:`combination`).
        """
        if tenant not in self._hist:
            return dict.fromkeys(horizons, (0.0, 0.0))
        q, _, y, scale, step = self._predict(tenant)
        z50 = self._gated(self._origins[tenant][-1][4])
        if self.combine:
            pair = self._grid[self._choice()]
            z50 = pair[:, 0] * z50 + pair[:, 1] * step
        knots = [0.0, *self._horizons]
        z50s = [0.0, *z50.tolist()]
        z90s = [0.0, *q[:, 1].tolist()]
        out: dict[float, tuple[float, float]] = {}
        for h in horizons:
            hh = min(max(float(h), 0.0), knots[-1])
            p50 = max(y + scale * float(np.interp(hh, knots, z50s)), 0.0)
            p90 = max(y + scale * float(np.interp(hh, knots, z90s)), p50)
            out[h] = (p50, p90)
        return out

    def combination(self) -> dict[float, dict[str, float]]:
        """Per trained horizon, the weights in use: ``{"model": a, "step": b}``.

        >>> MultiTaskForecaster(horizons_s=(600.0,)).combination()
        {600.0: {'model': 1.0, 'step': 0.0}}
        """
        pair = self._grid[self._choice()]
        return {
            h: {"model": float(a), "step": float(b)}
            for h, (a, b) in zip(self._horizons, pair, strict=True)
        }

    def trend(self, tenant: str) -> dict[float, dict[str, float]]:
        """Per trained horizon, probabilities of ``{"down", "flat", "up"}`` beyond +-band.

        >>> MultiTaskForecaster(horizons_s=(600.0,)).trend("unseen")
        {600.0: {'down': 0.0, 'flat': 1.0, 'up': 0.0}}
        """
        if tenant not in self._hist:
            return {h: {"down": 0.0, "flat": 1.0, "up": 0.0} for h in self._horizons}
        probs = self._predict(tenant)[1]
        return {
            h: {"down": float(p[0]), "flat": float(p[1]), "up": float(p[2])}
            for h, p in zip(self._horizons, probs, strict=True)
        }

    def forget(self, tenant: str) -> None:
        """Drop ``tenant``'s history, the forecasts it has not scored yet and its
        embedding slot; the network is shared and stays. A slot no other tenant shares
        is free for the next new tenant, and the tenant's rows in the replay buffer train
        the generic embedding from now on (so they do not shape the next owner's)."""
        self._hist.pop(tenant, None)
        self._origins.pop(tenant, None)
        self._waiting.pop(tenant, None)
        slot = self._slots.pop(tenant, None)
        if slot is not None and slot not in self._slots.values():
            self._buffer.tenant[self._buffer.tenant == slot] = 0
            self._free = None  # found again when the next new tenant comes
        if self._jobs is not None:
            self._jobs.forget(tenant)

    def tenants(self) -> list[str]:
        """Tenants seen so far."""
        return sorted(self._hist)

    def seen_until(self, tenant: str) -> float | None:
        """End of the newest window of ``tenant`` learned so far (None: never seen).
        :meth:`learn_one` ignores a window of the tenant that does not end after it (see
        :meth:`ignores`), so a model warm-started from a later span learns nothing until
        its windows pass this time."""
        hist = self._hist.get(tenant)
        return None if hist is None or hist.last_idx < 0 else hist.last_idx * hist.step_s

    def ignores(self, tenant: str, window_end: float) -> bool:
        """Whether :meth:`learn_one` would drop a window of ``tenant`` ending at
        ``window_end`` as late or repeated (it is not after the newest one learned)."""
        hist = self._hist.get(tenant)
        return hist is not None and round(float(window_end) / hist.step_s) <= hist.last_idx

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """All learned state as plain containers and tensors (``torch.save``-able, safe-load).

        Only the network and optimiser states (views of live tensors) are deep-copied;
        everything else is built fresh here, per-tenant arrays as tensors (a copy of
        thousands of tenants' histories as Python lists took seconds).
        """
        hist = {}
        for t, h in self._hist.items():
            st = h.to_state()
            hist[t] = {**st, "idx": torch.from_numpy(st["idx"]), "val": torch.from_numpy(st["val"])}
        live = copy.deepcopy(
            {
                "net": self._net.state_dict(),
                "ema": self._ema.state_dict(),
                "opt": self._opt.state_dict(),
                "rng": self._rng.bit_generator.state,
            }
        )
        return {
            **live,
            "buffer": self._buffer.to_state(),
            "hist": hist,
            "origins": {
                t: [
                    [o, torch.from_numpy(x.copy()), y, s, torch.from_numpy(p.copy()), st]
                    for o, x, y, s, p, st in d
                ]
                for t, d in self._origins.items()
            },
            "combine_err": torch.from_numpy(self._comb_err.copy()),
            "combine_n": torch.from_numpy(self._comb_n.copy()),
            "slots": copy.deepcopy(self._slots),
            "waiting": copy.deepcopy(self._waiting),
            "new_rows": self._new_rows,
            "steps": self._steps,
            "jobs": copy.deepcopy(self._jobs.state_dict()) if self._jobs is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the settings must match)."""
        state = copy.deepcopy(state)
        self._reset()
        self._net.load_state_dict(state["net"])
        self._ema.load_state_dict(state["ema"])
        self._opt.load_state_dict(state["opt"])
        self._rng.bit_generator.state = state["rng"]
        self._buffer.load_state(state["buffer"])
        self._hist = {t: TenantHistory.from_state(h) for t, h in state["hist"].items()}
        self._slots = dict(state["slots"])
        self._free = None
        self._origins = {}
        for t, d in state["origins"].items():
            origins: deque[Origin] = deque()
            for o, x, y, s, *made in d:
                xs = x.numpy().copy()
                if made:  # (outputs, step) as made when the window closed
                    packed, step = made[0].numpy().copy(), float(made[1])
                else:  # a checkpoint from before the combination: outputs made now
                    packed, step = self._forward(xs, self._slots[t]), 0.0
                origins.append((int(o), xs, float(y), float(s), packed, step))
            self._origins[t] = origins
        if "combine_err" in state:
            err = state["combine_err"].numpy().copy()
            if err.shape != self._comb_err.shape:
                raise ValueError("combination state does not fit combine_* settings")
            self._comb_err = err
            self._comb_n = state["combine_n"].numpy().copy()
            self._chosen = None
        self._waiting = {t: list(v) for t, v in state.get("waiting", {}).items()}
        self._new_rows = int(state["new_rows"])
        self._steps = int(state["steps"])
        if self._jobs is not None and state.get("jobs") is not None:
            self._jobs.load_state_dict(state["jobs"])

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def save_checkpoint(model: MultiTaskForecaster, path: str | Path) -> None:
    """Write ``model.state_dict()`` to ``path`` (atomically; read back as data only)."""
    save_state(model.state_dict(), path)


def load_checkpoint(model: MultiTaskForecaster, path: str | Path) -> None:
    """Warm-start ``model`` from a file written by :func:`save_checkpoint` (safe loading).

    Raises :class:`~dprobe.models.checkpoint.CheckpointError` for an unreadable file or
    one written by a model with other settings (the model is then left fresh);
    ``OSError`` if it cannot be read.
    """
    state = load_state(path)
    try:
        model.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError, ValueError, IndexError) as exc:
        model.load_state_dict(MultiTaskForecaster(**_settings(model)).state_dict())
        raise CheckpointError(
            f"{path}: not a checkpoint of this model ({first_line(exc)})"
        ) from exc


def _settings(model: MultiTaskForecaster) -> dict[str, Any]:
    """The constructor arguments ``model`` was built with (not ``name``, which
    ``job_inputs`` sets)."""
    params = inspect.signature(MultiTaskForecaster.__init__).parameters
    return {k: v for k, v in vars(model).items() if k in params and k != "self"}
