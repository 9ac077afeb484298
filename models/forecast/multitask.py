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
- **online training**: every closed window adds the row whose longest horizon has just
  passed to a FIFO replay buffer; every ``train_every`` new rows the model takes
  ``steps_per_train`` Adam steps on random batches of ``batch_size`` rows; forecasts use
  an exponential moving average of the weights (``ema_decay``);
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
import io
import pickle
import zlib
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dprobe.models.forecast.features import TenantHistory, n_features, origin_features
from dprobe.models.forecast.mmoe_net import N_TREND_CLASSES, MMoENet, pinball
from dprobe.models.forecast.replay import ReplayBuffer
from dprobe.models.forecast.target import demand_of, first_windows

DAY_S = 86_400.0
IGNORE = -100  # cross-entropy ignore index (a target that never arrived)


class MultiTaskForecaster:
    """The DProbe multi-task MMoE predictor behind the Forecaster contract (see module doc)."""

    name = "dprobe-mmoe"
    version = "1"

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
        self.utc_offset_s = utc_offset_s
        self.seed = seed
        self._horizons = tuple(float(h) for h in horizons_s)
        if not self._horizons or any(h <= 0 for h in self._horizons):
            raise ValueError("horizons_s must be positive seconds")
        if list(self._horizons) != sorted(self._horizons):
            raise ValueError("horizons_s must be increasing")
        torch.set_num_threads(1)
        self._reset()

    # -- construction -------------------------------------------------------------------
    def _reset(self) -> None:
        self._n_feat = n_features(self.k_lags, len(self._horizons))
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
        self._origins: dict[str, deque[tuple[int, np.ndarray, float, float]]] = {}
        self._slots: dict[str, int] = {}
        self._waiting: dict[str, list[float]] = {}  # first windows of unknown length
        self._new_rows = 0
        self._steps = 0
        self._cache: dict[str, tuple[int, int, np.ndarray, float, float]] = {}

    def _steps_of(self, step_s: float) -> list[int]:
        return [max(round(h / step_s), 1) for h in self._horizons]

    def _prototype_history(self, step_s: float) -> TenantHistory:
        steps = self._steps_of(step_s)
        length = max(round(DAY_S / step_s), max(steps) + self.k_lags) + 2
        return TenantHistory(step_s=step_s, length=length)

    def _slot(self, tenant: str) -> int:
        slot = self._slots.get(tenant)
        if slot is None:
            if len(self._slots) < self.max_tenants:
                slot = len(self._slots) + 1
                with torch.no_grad():  # a new tenant starts from the generic embedding
                    self._net.embed.weight[slot] = self._net.embed.weight[0]
                    self._ema.embed.weight[slot] = self._ema.embed.weight[0]
            else:  # beyond capacity, tenants share slots by a stable hash (assumption)
                slot = zlib.crc32(tenant.encode()) % self.max_tenants + 1
            self._slots[tenant] = slot
        return slot

    # -- the contract -------------------------------------------------------------------
    def learn_one(self, window: Any) -> None:
        """Add one closed window; label matured rows; train every ``train_every`` rows."""
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
        quota = getattr(window, "quota_gpus", None)
        hist.add(
            n,
            demand_of(window),
            pending=max(float(window.pending_gpus or 0.0), 0.0),
            quota=float(quota) if quota else None,
        )
        steps = self._steps_of(hist.step_s)
        x, y, scale = origin_features(
            hist, k_lags=self.k_lags, horizon_steps=steps, utc_offset_s=self.utc_offset_s
        )
        origins = self._origins[tenant]
        origins.append((n, x, y, scale))
        while origins and origins[0][0] + max(steps) <= n:
            self._label(tenant, hist, steps, origins.popleft())
        self._cache.pop(tenant, None)
        if self._new_rows >= self.train_every and len(self._buffer) >= self.min_rows:
            self._new_rows = 0
            for _ in range(self.steps_per_train):
                self._train_step()

    def _label(
        self,
        tenant: str,
        hist: TenantHistory,
        steps: list[int],
        origin: tuple[int, np.ndarray, float, float],
    ) -> None:
        """Turn a matured origin ``(window, features, demand, scale)`` into a buffer row."""
        o, x, y0, scale = origin
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
        self._cache.clear()

    def _predict(self, tenant: str) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(scaled quantiles [H, 2], trend probabilities [H, 3], demand now, scale)."""
        hist = self._hist[tenant]
        cached = self._cache.get(tenant)
        if cached is None or cached[0] != hist.last_idx or cached[1] != self._steps:
            origins = self._origins[tenant]
            if origins and origins[-1][0] == hist.last_idx:  # built when the window closed
                _, x, y, scale = origins[-1]
            else:
                x, y, scale = origin_features(
                    hist,
                    k_lags=self.k_lags,
                    horizon_steps=self._steps_of(hist.step_s),
                    utc_offset_s=self.utc_offset_s,
                )
            with torch.no_grad():
                q, logits = self._ema(
                    torch.from_numpy(x).unsqueeze(0), torch.tensor([self._slots[tenant]])
                )
            packed = np.concatenate(
                [q[0].numpy().ravel(), torch.softmax(logits[0], dim=1).numpy().ravel()]
            )
            cached = (hist.last_idx, self._steps, packed, y, scale)
            self._cache[tenant] = cached
        packed, y, scale = cached[2], cached[3], cached[4]
        nh = len(self._horizons)
        return packed[: 2 * nh].reshape(nh, 2), packed[2 * nh :].reshape(nh, 3), y, scale

    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        """``{horizon_s: (p50, p90)}`` in GPUs; an unseen tenant gets ``(0.0, 0.0)``.

        With ``gate_changes``, a horizon whose trend head gives neither "down" nor "up" a
        probability of at least ``gate_threshold`` keeps p50 = demand now: the median of a
        change that is more often than not "flat" is no change (0.5 is the median's own
        definition; a higher threshold leaves a margin for miscalibration).
        """
        if tenant not in self._hist:
            return dict.fromkeys(horizons, (0.0, 0.0))
        q, probs, y, scale = self._predict(tenant)
        z50 = q[:, 0].copy()
        if self.gate_changes:
            z50[np.maximum(probs[:, 0], probs[:, 2]) < self.gate_threshold] = 0.0
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

    def tenants(self) -> list[str]:
        """Tenants seen so far."""
        return sorted(self._hist)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """All learned state as plain containers and tensors (``torch.save``-able, safe-load)."""
        return copy.deepcopy(
            {
                "net": self._net.state_dict(),
                "ema": self._ema.state_dict(),
                "opt": self._opt.state_dict(),
                "rng": self._rng.bit_generator.state,
                "buffer": self._buffer.to_state(),
                "hist": {t: h.to_state() for t, h in self._hist.items()},
                "origins": {
                    t: [[o, torch.from_numpy(x.copy()), y, s] for o, x, y, s in d]
                    for t, d in self._origins.items()
                },
                "slots": dict(self._slots),
                "waiting": dict(self._waiting),
                "new_rows": self._new_rows,
                "steps": self._steps,
            }
        )

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
        self._origins = {
            t: deque((int(o), x.numpy().copy(), float(y), float(s)) for o, x, y, s in d)
            for t, d in state["origins"].items()
        }
        self._slots = dict(state["slots"])
        self._waiting = {t: list(v) for t, v in state.get("waiting", {}).items()}
        self._new_rows = int(state["new_rows"])
        self._steps = int(state["steps"])

    def n_parameters(self) -> int:
        """Number of trainable parameters of the network."""
        return sum(p.numel() for p in self._net.parameters())

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def save_checkpoint(model: MultiTaskForecaster, path: str | Path) -> None:
    """Write ``model.state_dict()`` to ``path`` (torch format, loadable with weights_only)."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    Path(path).write_bytes(buf.getvalue())


class CheckpointError(ValueError):
    """A checkpoint cannot be read or does not fit the model's settings."""


def load_checkpoint(model: MultiTaskForecaster, path: str | Path) -> None:
    """Warm-start ``model`` from a file written by :func:`save_checkpoint` (safe loading).

    Raises :class:`CheckpointError` for an unreadable file or one written by a model
    with other settings (the model is then left fresh); ``OSError`` if it cannot be read.
    """
    raw = Path(path).read_bytes()
    try:
        state = torch.load(io.BytesIO(raw), weights_only=True)
        model.load_state_dict(state)
    except (pickle.UnpicklingError, EOFError, RuntimeError, KeyError, TypeError, ValueError) as exc:
        model.load_state_dict(MultiTaskForecaster(**_settings(model)).state_dict())
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: not a checkpoint of this model ({first})") from exc


def _settings(model: MultiTaskForecaster) -> dict[str, Any]:
    return {k: v for k, v in vars(model).items() if not k.startswith("_")}
