"""HPA-style damping of one tenant's quota recommendation (Kubernetes semantics, in GPUs).

Pure functions over a plain per-tenant :class:`MoveHistory`, as the Kubernetes Horizontal
Pod Autoscaler does it (``pkg/controller/podautoscaler/horizontal.go``):

1. **tolerance**: a desired quota within ``tolerance`` of the current one is no change;
2. **stabilisation**: keep the recommendations of the last window; the way up takes the
   *lowest* recommendation of the up window (0 s by default: immediate), the way down the
   *highest* of the down window (300 s by default), so a dip must last the window;
3. **rate limits**: per ``period_s``, at most ``+max(percent, nodes)`` up (HPA default
   100 % or 4 pods per 15 s, the larger) and ``-percent`` down (100 % per 15 s);
4. **cooldown** (an assumption, HPA v2 has none): no change against the direction of the
   tenant's last change for ``cooldown_s``.

Example:
    >>> h = MoveHistory()
    >>> s = DampingSettings()
    >>> damp(s, h, ts=0.0, current=64, desired=32, node_gpus=8)   # nothing higher in the window
    32
    >>> record(h, ts=0.0, delta=-32)
    >>> damp(s, h, ts=60.0, current=32, desired=96, node_gpus=8)  # up at once, but at most x2
    64
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DampingSettings:
    """Kubernetes HPA defaults (``behavior`` of autoscaling/v2), plus a reversal cooldown."""

    tolerance: float = 0.1
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 300.0
    period_s: float = 15.0
    scale_up_max_percent: float = 100.0
    scale_up_max_nodes: int = 4
    scale_down_max_percent: float = 100.0
    cooldown_s: float = 60.0

    def __post_init__(self) -> None:
        for name in (
            "tolerance",
            "scale_up_stabilization_s",
            "scale_down_stabilization_s",
            "scale_up_max_percent",
            "scale_down_max_percent",
            "cooldown_s",
        ):
            # NaN would pass a ``< 0`` test and switch the rule off (every comparison with
            # it is false), or fail later inside a plan; infinity is no window or limit
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            raise ValueError(f"period_s must be a finite number > 0, not {self.period_s!r}")
        if not whole_number(self.scale_up_max_nodes) or self.scale_up_max_nodes < 0:
            raise ValueError(
                f"scale_up_max_nodes must be a whole number >= 0, not {self.scale_up_max_nodes!r}"
            )


def whole_number(x: object) -> bool:
    """``x`` is an integer (not a bool, which would read as 0 or 1 nodes)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@dataclass
class MoveHistory:
    """One tenant's recent quota moves: the recommendations of the stabilisation window
    and the realised changes (for rate limits and the cooldown); plain and serialisable.

    >>> MoveHistory.from_dict(MoveHistory(changes=[(0.0, 8)]).to_dict()).changes
    [(0.0, 8)]
    """

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    changes: list[tuple[float, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, list[list[float]]]:
        return {
            "recommendations": [[t, v] for t, v in self.recommendations],
            "changes": [[t, v] for t, v in self.changes],
        }

    @classmethod
    def from_dict(cls, d: dict[str, list[list[float]]]) -> MoveHistory:
        return cls(
            recommendations=[(float(t), int(v)) for t, v in d.get("recommendations", [])],
            changes=[(float(t), int(v)) for t, v in d.get("changes", [])],
        )


def apply_tolerance(s: DampingSettings, current: int, desired: int) -> int:
    """``current`` when ``desired`` is within the tolerance band around it (HPA rule).

    >>> apply_tolerance(DampingSettings(), 80, 86), apply_tolerance(DampingSettings(), 80, 96)
    (80, 96)
    """
    # the band's edge is within it, also where floating point puts it a hair inside
    # (0.29 * 800 is 231.99..., not 232)
    if current > 0 and abs(desired - current) <= s.tolerance * current * (1 + 1e-12):
        return current
    return desired


def damp(
    s: DampingSettings,
    h: MoveHistory,
    *,
    ts: float,
    current: int,
    desired: int,
    node_gpus: int,
    floor: int = 0,
) -> int:
    """Record ``desired`` and return the damped recommendation (a multiple of ``node_gpus``
    away from ``current``). Mutates ``h`` (adds the recommendation, prunes old entries).

    ``floor``: a need that is not noise (jobs waiting now): the tolerance never holds the
    recommendation below it; stabilisation, cooldown and rate limits still apply.
    """
    desired = apply_tolerance(s, current, desired)
    if floor > current:
        desired = max(desired, floor)
    h.recommendations.append((ts, desired))
    keep = max(s.scale_up_stabilization_s, s.scale_down_stabilization_s)
    h.recommendations[:] = [(t, v) for t, v in h.recommendations if t > ts - keep or t == ts]
    up_cut, down_cut = ts - s.scale_up_stabilization_s, ts - s.scale_down_stabilization_s
    up_rec = min(v for t, v in h.recommendations if t > up_cut or t == ts)
    down_rec = max(v for t, v in h.recommendations if t > down_cut or t == ts)
    rec = current
    rec = max(rec, up_rec)
    rec = min(rec, down_rec)
    rec = _cooldown(s, h, ts, current, rec)
    return _rate_limit(s, h, ts=ts, current=current, rec=rec, node_gpus=node_gpus)


def _cooldown(s: DampingSettings, h: MoveHistory, ts: float, current: int, rec: int) -> int:
    if not h.changes or s.cooldown_s <= 0:
        return rec
    last_ts, last_delta = h.changes[-1]
    if ts - last_ts < s.cooldown_s and (rec - current) * last_delta < 0:
        return current
    return rec


def lowest_quota(
    s: DampingSettings, h: MoveHistory, *, ts: float, current: int, node_gpus: int
) -> int:
    """The lowest quota the scale-down rate limit lets ``current`` go to at ``ts``.

    >>> lowest_quota(DampingSettings(scale_down_max_percent=50), MoveHistory(), ts=0.0,
    ...              current=48, node_gpus=8)
    24
    """
    if s.scale_down_max_percent >= 100:  # all of it, every period: no history to read
        return 0
    return _rate_limit(s, h, ts=ts, current=current, rec=0, node_gpus=node_gpus)


def _rate_limit(
    s: DampingSettings, h: MoveHistory, *, ts: float, current: int, rec: int, node_gpus: int
) -> int:
    recent = [d for t, d in h.changes if t > ts - s.period_s]
    if rec > current:
        start = current - sum(d for d in recent if d > 0)
        limit = max(
            start * (1 + s.scale_up_max_percent / 100), start + s.scale_up_max_nodes * node_gpus
        )
        room = _whole_nodes(limit - current, node_gpus)
        return current + max(0, min(rec - current, room))
    if rec < current:
        start = current - sum(d for d in recent if d < 0)
        limit = start * (1 - s.scale_down_max_percent / 100)
        room = _whole_nodes(current - limit, node_gpus)
        return current - max(0, min(current - rec, room))
    return rec


def _whole_nodes(gpus: float, node_gpus: int) -> int:
    """``gpus`` rounded down to whole nodes, where a limit that is a whole number of nodes
    stays one despite floating point (13 % of 800 GPUs: ``800 * 1.13`` is 903.99...)."""
    return math.floor(gpus / node_gpus + 1e-9) * node_gpus


def record(
    h: MoveHistory, *, ts: float, delta: int, keep_s: float = 3600.0, period_s: float = 0.0
) -> None:
    """Remember a realised quota change (for rate limits and the cooldown): the changes of
    the last ``keep_s``, at most the last 64 of them, but always every change of the last
    ``period_s`` (the rate limits add them all up)."""
    if delta:
        h.changes.append((ts, delta))
    kept = [(t, d) for t, d in h.changes if t > ts - keep_s]
    in_period = sum(1 for t, _ in kept if t > ts - period_s)
    h.changes[:] = kept[-max(64, in_period) :]
