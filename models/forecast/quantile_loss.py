"""The pinball (quantile) loss, the one scoring rule of the p90 everywhere in dprobe.

The evaluation scores p90 with it, the calibration layer compares its p90 with the inner
model's by it, and the forecast gate compares a forecast with "demand now" by it.

Example:
    >>> pinball(2.0, 0.9), round(pinball(-2.0, 0.9), 9)  # 2 above costs 9 x 2 below
    (1.8, 0.2)
"""

from __future__ import annotations


def pinball(error: float, level: float) -> float:
    """Pinball loss at ``level`` of ``error = actual - quantile`` (same unit as ``error``)."""
    return level * error if error >= 0 else (level - 1.0) * error
