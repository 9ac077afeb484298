"""A fixed-size FIFO replay buffer of labelled training rows (numpy rings).

Rows are added as their labels become known (the longest horizon has passed); training
samples uniform batches from what the buffer holds, so recent weeks dominate and old
regimes age out. Capacity is a setting.

Example:
    >>> import numpy as np
    >>> b = ReplayBuffer(capacity=2, n_features=3, n_horizons=1)
    >>> for i in range(3):
    ...     b.add(np.full(3, i, np.float32), 0, np.zeros(1, np.float32), np.ones(1, np.float32))
    >>> len(b), sorted(b.x[:, 0].tolist())
    (2, [1.0, 2.0])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class ReplayBuffer:
    """FIFO ring of (features, tenant slot, targets, target mask, row weight)."""

    def __init__(self, capacity: int, n_features: int, n_horizons: int) -> None:
        self.capacity = capacity
        self.x = np.zeros((capacity, n_features), dtype=np.float32)
        self.tenant = np.zeros(capacity, dtype=np.int64)
        self.y = np.zeros((capacity, n_horizons), dtype=np.float32)
        self.mask = np.zeros((capacity, n_horizons), dtype=np.float32)
        self.weight = np.ones(capacity, dtype=np.float32)
        self.size = 0
        self.head = 0

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        x: np.ndarray,
        tenant: int,
        y: np.ndarray,
        mask: np.ndarray,
        weight: float = 1.0,
    ) -> None:
        i = self.head
        self.x[i], self.tenant[i], self.y[i], self.mask[i] = x, tenant, y, mask
        self.weight[i] = weight
        self.head = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, rng: np.random.Generator, batch: int) -> dict[str, torch.Tensor]:
        """A uniform random batch (with replacement) as tensors."""
        rows = rng.integers(0, self.size, size=batch)
        return {
            "x": torch.from_numpy(self.x[rows]),
            "tenant": torch.from_numpy(self.tenant[rows]),
            "y": torch.from_numpy(self.y[rows]),
            "mask": torch.from_numpy(self.mask[rows]),
            "weight": torch.from_numpy(self.weight[rows]),
        }

    def to_state(self) -> dict[str, Any]:
        n = self.size
        return {
            "x": torch.from_numpy(self.x[:n].copy()),
            "tenant": torch.from_numpy(self.tenant[:n].copy()),
            "y": torch.from_numpy(self.y[:n].copy()),
            "mask": torch.from_numpy(self.mask[:n].copy()),
            "weight": torch.from_numpy(self.weight[:n].copy()),
            "head": self.head,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        n = int(state["x"].shape[0])
        if n > self.capacity:
            raise ValueError(f"buffer state holds {n} rows, capacity is {self.capacity}")
        for name in ("x", "tenant", "y", "mask", "weight"):
            getattr(self, name)[:n] = state[name].numpy()
        self.size = n
        self.head = int(state["head"]) % self.capacity
