"""The multi-gate mixture-of-experts network of the DProbe multi-task predictor (torch).

Ma et al.'s MMoE (KDD 2018) as DProbe uses it (Zhou et al., Euro-Par 2024): shared
experts, one softmax gate and one tower per task. Input = features plus a tenant
embedding. Tasks: one quantile head per horizon (p50 and p90 of the scaled demand change)
and one trend head (down / flat / up logits at every horizon). Sizes are **assumptions**
(the paper gives no architecture details) and are constructor settings.

Each quantile tower returns ``(z50, z90)`` with ``z90 = z50 + softplus(raw)`` so the
quantiles never cross. The towers' last layers start at zero (``z50 = 0``: the model
starts as "same as now" and learns the change from there).

Example:
    >>> import torch
    >>> net = MMoENet(n_features=10, n_horizons=3, n_tenant_slots=4)
    >>> q, trend = net(torch.zeros(2, 10), torch.zeros(2, dtype=torch.long))
    >>> tuple(q.shape), tuple(trend.shape)
    ((2, 3, 2), (2, 3, 3))
"""

from __future__ import annotations

import torch
from torch import nn

N_TREND_CLASSES = 3  # down, flat, up


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class MMoENet(nn.Module):
    """Shared experts, one gate and one tower per task; see the module doc."""

    def __init__(
        self,
        *,
        n_features: int,
        n_horizons: int,
        n_tenant_slots: int,
        embed_dim: int = 8,
        n_experts: int = 4,
        expert_hidden: int = 64,
        expert_out: int = 32,
        tower_hidden: int = 16,
        spread_init: float = -2.0,
    ) -> None:
        super().__init__()
        d_in = n_features + embed_dim
        self.n_horizons = n_horizons
        self.embed = nn.Embedding(n_tenant_slots, embed_dim)
        nn.init.normal_(self.embed.weight, std=0.01)
        self.experts = nn.ModuleList(
            [_mlp([d_in, expert_hidden, expert_out]) for _ in range(n_experts)]
        )
        n_tasks = n_horizons + 1
        self.gates = nn.ModuleList([nn.Linear(d_in, n_experts) for _ in range(n_tasks)])
        self.towers = nn.ModuleList(
            [
                nn.Sequential(nn.ReLU(), _mlp([expert_out, tower_hidden, 2]))
                for _ in range(n_horizons)
            ]
        )
        self.trend_tower = nn.Sequential(
            nn.ReLU(), _mlp([expert_out, tower_hidden, N_TREND_CLASSES * n_horizons])
        )
        for tower in self.towers:
            last = list(tower.modules())[-1]
            assert isinstance(last, nn.Linear)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
            with torch.no_grad():
                last.bias[1] = spread_init

    def forward(self, x: torch.Tensor, tenant: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` [B, F], ``tenant`` [B] -> (quantiles [B, H, 2], trend logits [B, H, 3])."""
        z = torch.cat([x, self.embed(tenant)], dim=1)
        experts = torch.stack([e(z) for e in self.experts], dim=1)  # [B, E, D]
        mixed = [(torch.softmax(g(z), dim=1).unsqueeze(2) * experts).sum(dim=1) for g in self.gates]
        quants = []
        for tower, m in zip(self.towers, mixed[: self.n_horizons], strict=True):
            raw = tower(m)
            z50 = raw[:, 0]
            z90 = z50 + nn.functional.softplus(raw[:, 1])
            quants.append(torch.stack([z50, z90], dim=1))
        trend = self.trend_tower(mixed[-1]).view(-1, self.n_horizons, N_TREND_CLASSES)
        return torch.stack(quants, dim=1), trend


def pinball(pred: torch.Tensor, target: torch.Tensor, q: float, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean quantile (pinball) loss of ``pred`` for quantile ``q``.

    >>> pinball(torch.tensor([0.0]), torch.tensor([1.0]), 0.9, torch.tensor([1.0])).item()
    0.8999999761581421
    """
    diff = target - pred
    loss = torch.maximum(q * diff, (q - 1) * diff) * mask
    return loss.sum() / mask.sum().clamp(min=1.0)
