"""Quota planner: per-tenant demand forecasts -> one zero-sum plan of whole-node quota moves.

DProbe (Zhou et al., Euro-Par 2024) scales each VC's GPU quota from its predicted demand.
The paper's planner internals are not public; what follows is this implementation's
reading, every rule a setting (:class:`PlannerSettings`) and called an assumption in
``docs/planner.md``:

1. desired quota = the ``quantile`` forecast (p90 by default) x ``(1 + headroom)``, or
   what the tenant needs right now in whole nodes (``need_gpus``: busy nodes plus the
   nodes its waiting jobs need) if that is more; rounded up to whole nodes, at least the
   tenant's guarantee, at most its ``max_quota_gpus``;
2. HPA damping (:mod:`dprobe.models.planner_damping`): 10 % tolerance, no stabilisation up,
   300 s down (highest recommendation in the window), rate limits per period, cooldown;
   the tolerance never holds a tenant below its need now (waiting jobs are not noise);
3. first, tenants whose jobs wait now (``need_gpus`` above their quota) take idle nodes
   from any tenant down to that tenant's own need now, as fast as its scale-down rate
   limit allows (``urgent_first``: waiting jobs come before capacity kept for forecast
   demand; nodes no forecast keeps go first); then
   tenants whose damped target is above their quota *receive* from tenants whose damped
   target is below it, from what is left once the nodes that waiting jobs still lack
   (damping held them back) are kept free; a donor gives only GPUs on whole idle nodes
   (never a busy node) and never goes below its guarantee; nodes are matched one at a
   time (receivers below their guarantee first, then the largest remaining need; donors
   with the largest remaining offer first);
4. a plan only moves quota between tenants, so its deltas sum to zero and the total quota
   (<= capacity) never grows.

Example:
    >>> planner = Planner(PlannerSettings(node_gpus=8))
    >>> plan = planner.plan(PlanInput(ts=0.0, capacity_gpus=32, tenants=(
    ...     TenantState("a", quota_gpus=16, guaranteed_gpus=8, p50=30.0, p90=32.0),
    ...     TenantState("b", quota_gpus=16, guaranteed_gpus=8, idle_gpus=16),
    ... )))
    >>> [(m.tenant, m.current_quota_gpus, m.target_quota_gpus, m.reason) for m in plan.moves]
    [('a', 16, 24, 'forecast_up_partial'), ('b', 16, 8, 'lend_idle')]
    >>> sum(m.delta_gpus for m in plan.moves)
    0
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from dprobe.models.planner_damping import (
    DampingSettings,
    MoveHistory,
    damp,
    lowest_quota,
    record,
    whole_number,
)
from dprobe.schema import MAX_ID_CHARS

Reason = Literal[
    "waiting_jobs",  # raised for jobs that wait now (its need is above its quota)
    "forecast_up",  # raised to the damped forecast
    "forecast_up_partial",  # raised, but less than wanted: not enough idle nodes to take
    "below_guarantee",  # raised towards the guaranteed minimum
    "lend_idle",  # lowered: idle nodes lent to a tenant that needs them
    "steady",  # no change wanted
    "held",  # change wanted but damped away (tolerance, window, cooldown)
    "no_donor",  # wants more, but no tenant has idle nodes to lend
    "no_taker",  # could go lower, but no tenant took its idle nodes (or it has none)
    "returned",  # raised: idle capacity it had lent came back (it is below its nominal quota)
]


HISTORY_KEEP_S = 3600.0  # the least time a tenant's quota changes are remembered


@dataclass(frozen=True)
class PlannerSettings:
    """How targets are computed. Damping defaults are Kubernetes HPA's (see damping module)."""

    node_gpus: int = 8
    quantile: Literal["p50", "p90"] = "p90"
    headroom: float = 0.0
    urgent_first: bool = True
    return_idle: bool = False
    damping: DampingSettings = field(default_factory=DampingSettings)

    def __post_init__(self) -> None:
        if not whole_number(self.node_gpus):
            # quotas are whole nodes: 8.5 GPUs a node would plan fractions of GPUs
            raise ValueError(f"node_gpus must be a whole number >= 1, not {self.node_gpus!r}")
        if self.node_gpus < 1:
            raise ValueError("node_gpus must be >= 1")
        if not (math.isfinite(self.headroom) and self.headroom >= 0):
            # NaN or infinity passed a ``< 0`` test and failed inside every plan
            raise ValueError(f"headroom must be a finite number >= 0, not {self.headroom!r}")
        if self.quantile not in ("p50", "p90"):  # any other would silently size to p50
            raise ValueError(f"quantile must be 'p50' or 'p90', not {self.quantile!r}")


@dataclass(frozen=True)
class TenantState:
    """One tenant as the planner sees it at a planning instant (GPUs, whole-node multiples).

    ``idle_gpus``: GPUs on nodes of this tenant's quota that run nothing (lendable now).
    ``need_gpus``: what it needs now at node granularity (0 when unknown): a job of 16 GPUs
    waiting in a tenant whose nodes are all partly busy needs 16 more, whatever the sum.
    ``max_quota_gpus``: the most it may hold (Volcano ``capability``); ``None`` = capacity.
    ``hold_gpus``: what it is forecast to need within a borrower's expected run time (0 when
    unknown): idle nodes up to it are not lent, so they need not be reclaimed soon after.
    ``nominal_gpus``: the quota it owns (Kueue ``nominalQuota``; ``None``: not known):
    capacity borrowed beyond it that the borrower leaves idle goes back to owners below
    theirs (``PlannerSettings.return_idle``). A ``p90`` below ``p50`` (crossed quantiles of
    an uncalibrated model) counts as ``p50`` when the planner sizes to p90.
    """

    tenant: str
    quota_gpus: int
    guaranteed_gpus: int = 0
    idle_gpus: int = 0
    p50: float = 0.0
    p90: float = 0.0
    horizon_s: float = 600.0
    max_quota_gpus: int | None = None
    need_gpus: float = 0.0
    hold_gpus: float = 0.0
    nominal_gpus: int | None = None


@dataclass(frozen=True)
class PlanInput:
    """Everything one plan depends on; the plan id is a hash of it."""

    ts: float
    capacity_gpus: int
    tenants: tuple[TenantState, ...]


@dataclass(frozen=True)
class Decision:
    """The planner's decision for one tenant; a *move* when ``delta_gpus != 0``."""

    tenant: str
    current_quota_gpus: int
    target_quota_gpus: int
    delta_gpus: int
    desired_gpus: int
    reason: Reason
    message: str
    p50: float
    p90: float
    horizon_s: float
    guaranteed_gpus: int

    @property
    def action(self) -> Literal["scale_up", "scale_down", "none"]:
        if self.delta_gpus > 0:
            return "scale_up"
        return "scale_down" if self.delta_gpus < 0 else "none"


@dataclass(frozen=True)
class Plan:
    """One planning instant: a decision per tenant (sorted by tenant); deltas sum to zero."""

    plan_id: str
    ts: float
    decisions: tuple[Decision, ...]

    @property
    def moves(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.delta_gpus != 0)

    def targets(self) -> dict[str, int]:
        return {d.tenant: d.target_quota_gpus for d in self.decisions}


def plan_id(inp: PlanInput, settings: PlannerSettings) -> str:
    """Deterministic id from the inputs and settings (same inputs, same id).

    >>> i = PlanInput(ts=1.0, capacity_gpus=8, tenants=(TenantState("a", 8),))
    >>> plan_id(i, PlannerSettings()) == plan_id(i, PlannerSettings())
    True
    """
    # tenants in name order: the same tenants given in another order are the same plan
    inp = replace(inp, tenants=tuple(sorted(inp.tenants, key=lambda t: t.tenant)))
    body = json.dumps([asdict(inp), asdict(settings)], sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:24]


class Planner:
    """Stateful wrapper: keeps the damping history per tenant between plans.

    ``state_dict()`` / ``load_state_dict()`` give that history as plain data, so a
    restarted worker resumes with its stabilisation windows intact.
    """

    def __init__(self, settings: PlannerSettings | None = None) -> None:
        self.settings = settings or PlannerSettings()
        self._history: dict[str, MoveHistory] = {}

    def state_dict(self) -> dict[str, Any]:
        return {"history": {t: h.to_dict() for t, h in self._history.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; a ``ValueError`` (nothing loaded) if ``state`` is
        not such a state."""
        history = state.get("history", {}) if isinstance(state, dict) else None
        loaded = None
        if isinstance(history, dict) and all(isinstance(h, dict) for h in history.values()):
            # a tenant's entries that are no (time, GPUs) pairs failed as a TypeError
            with contextlib.suppress(TypeError, ValueError):
                loaded = {t: MoveHistory.from_dict(h) for t, h in history.items()}
        if loaded is None:
            raise ValueError(
                "planner state: expected {'history': {tenant: {'recommendations': [...], "
                f"'changes': [...]}}}}, got {type(state).__name__} {str(state)[:80]}"
            )
        self._history = loaded

    def forget(self, tenant: str) -> None:
        """Drop ``tenant``'s move history (its damping starts afresh)."""
        self._history.pop(tenant, None)

    def plan(self, inp: PlanInput) -> Plan:
        """Compute one plan and remember it as applied (the caller applies every move)."""
        s, node = self.settings, self.settings.node_gpus
        _validate(inp, node)
        by_name = sorted(inp.tenants, key=lambda t: t.tenant)
        desired: dict[str, int] = {}
        damped: dict[str, int] = {}
        lowest: dict[str, int] = {}  # what the scale-down rate limit lets it go down to
        for t in by_name:
            h = self._history.setdefault(t.tenant, MoveHistory())
            lowest[t.tenant] = lowest_quota(
                s.damping, h, ts=inp.ts, current=t.quota_gpus, node_gpus=node
            )
            desired[t.tenant] = _desired(s, t, inp.capacity_gpus)
            target = damp(
                s.damping,
                h,
                ts=inp.ts,
                current=t.quota_gpus,
                desired=desired[t.tenant],
                node_gpus=node,
                floor=min(ceil_to_node(t.need_gpus, node), desired[t.tenant]),
            )
            if t.quota_gpus < t.guaranteed_gpus:  # restoring a guarantee is never damped away
                # but never past the ceiling: the desired quota is already at most it
                guarantee = ceil_to_node(t.guaranteed_gpus, node)
                target = max(target, min(guarantee, desired[t.tenant]))
            damped[t.tenant] = target
        want = {
            t.tenant: damped[t.tenant] - t.quota_gpus
            for t in by_name
            if damped[t.tenant] > t.quota_gpus
        }
        below = {t.tenant: t.quota_gpus < t.guaranteed_gpus for t in by_name}
        got: dict[str, int] = {}
        if s.urgent_first:
            got = _urgent(by_name, damped, lowest, below, node)
        lent = {t.tenant: -min(0, got.get(t.tenant, 0)) for t in by_name}
        want = {r: w - max(0, got.get(r, 0)) for r, w in want.items()}
        offer = {
            t.tenant: _offer(
                replace(
                    t,
                    quota_gpus=t.quota_gpus - lent[t.tenant],
                    idle_gpus=t.idle_gpus - lent[t.tenant],
                ),
                damped[t.tenant],
                node,
            )
            for t in by_name
        }
        waiting = sum(
            max(0, ceil_to_node(t.need_gpus, node) - t.quota_gpus - max(0, got.get(t.tenant, 0)))
            for t in by_name
        )
        _hold_back(offer, waiting, node)
        matched = _match(want, offer, below, node)
        for r, d in matched.items():
            got[r] = got.get(r, 0) + d
        if s.return_idle:
            left = {t: o + min(0, matched.get(t, 0)) for t, o in offer.items()}
            for r, d in _return_home(by_name, left, got, below, node).items():
                got[r] = got.get(r, 0) + d
        decisions = []
        # the changes the cooldown and the rate limits look back on: an hour, or longer
        # when either reaches further (a cooldown of two hours must see a two-hour-old move)
        keep_s = max(HISTORY_KEEP_S, s.damping.cooldown_s, s.damping.period_s)
        for t in by_name:
            delta = got.get(t.tenant, 0)
            record(
                self._history[t.tenant],
                ts=inp.ts,
                delta=delta,
                keep_s=keep_s,
                period_s=s.damping.period_s,
            )
            reason, msg = _explain(t, desired[t.tenant], damped[t.tenant], delta)
            decisions.append(
                Decision(
                    tenant=t.tenant,
                    current_quota_gpus=t.quota_gpus,
                    target_quota_gpus=t.quota_gpus + delta,
                    delta_gpus=delta,
                    desired_gpus=desired[t.tenant],
                    reason=reason,
                    message=msg,
                    p50=t.p50,
                    p90=t.p90,
                    horizon_s=t.horizon_s,
                    guaranteed_gpus=t.guaranteed_gpus,
                )
            )
        return Plan(plan_id=plan_id(inp, s), ts=inp.ts, decisions=tuple(decisions))


def _validate(inp: PlanInput, node: int) -> None:
    if not math.isfinite(inp.ts):  # NaN emptied the stabilisation window inside the damping
        raise ValueError(f"ts must be a finite time, got {inp.ts!r}")
    capacity = inp.capacity_gpus
    if not (isinstance(capacity, int | float) and math.isfinite(capacity) and capacity >= 0):
        raise ValueError(f"capacity_gpus must be a finite number >= 0, got {capacity!r}")
    names = [t.tenant for t in inp.tenants]
    if len(set(names)) != len(names):
        raise ValueError("tenant names must be unique")
    for name in names:
        if not 1 <= len(name) <= MAX_ID_CHARS:  # no ScalingEvent would carry it
            raise ValueError(
                f"tenant names must be 1 to {MAX_ID_CHARS} characters, not {name[:40]!r}"
            )
    total = sum(t.quota_gpus for t in inp.tenants)
    if total > inp.capacity_gpus:
        raise ValueError(f"quotas sum to {total} GPUs, more than the capacity {inp.capacity_gpus}")
    for t in inp.tenants:
        if not math.isfinite(t.guaranteed_gpus):  # it failed later, rounded to whole nodes
            raise ValueError(
                f"{t.tenant}: guaranteed_gpus must be a finite number >= 0, "
                f"not {t.guaranteed_gpus!r}"
            )
        if t.quota_gpus < 0 or t.guaranteed_gpus < 0 or t.idle_gpus < 0:
            raise ValueError(f"{t.tenant}: quota, guarantee and idle GPUs must be >= 0")
        if t.quota_gpus % node or t.idle_gpus % node:
            raise ValueError(f"{t.tenant}: quota and idle GPUs must be multiples of {node}")
        if t.max_quota_gpus is not None and not t.max_quota_gpus >= 0:
            # a negative one read as a ceiling of 0, a NaN one as no ceiling
            raise ValueError(f"{t.tenant}: max_quota_gpus must be >= 0 (None: the capacity)")
        if t.max_quota_gpus is not None and t.max_quota_gpus < t.guaranteed_gpus:
            # a ceiling below the guarantee: the guarantee won, past the ceiling, unsaid
            raise ValueError(
                f"{t.tenant}: max_quota_gpus {t.max_quota_gpus} is below its guarantee "
                f"{t.guaranteed_gpus} (a ceiling is at least the guarantee)"
            )
        if t.idle_gpus > t.quota_gpus:
            raise ValueError(f"{t.tenant}: idle GPUs {t.idle_gpus} exceed its quota {t.quota_gpus}")
        if not all(math.isfinite(x) and x >= 0 for x in (t.p50, t.p90, t.need_gpus, t.hold_gpus)):
            raise ValueError(f"{t.tenant}: forecasts and need must be finite and >= 0")
        if not (math.isfinite(t.horizon_s) and t.horizon_s >= 0):
            raise ValueError(f"{t.tenant}: horizon_s must be finite and >= 0, not {t.horizon_s!r}")
        if t.horizon_s == 0:  # no ScalingEvent would carry it
            raise ValueError(f"{t.tenant}: horizon_s must be > 0 s, not {t.horizon_s!r}")


def ceil_to_node(gpus: float, node: int) -> int:
    """GPUs rounded up to whole nodes of ``node`` GPUs: ``ceil_to_node(9, 8) -> 16``."""
    return math.ceil(gpus / node - 1e-9) * node


def floor_to_node(gpus: float, node: int) -> int:
    """GPUs rounded down to whole nodes of ``node`` GPUs, as reported capacity and quotas
    are read: ``floor_to_node(20.0, 8) -> 16``."""
    return math.floor(gpus / node + 1e-9) * node


def _desired(s: PlannerSettings, t: TenantState, capacity: int) -> int:
    q = max(t.p90, t.p50) if s.quantile == "p90" else t.p50  # crossed quantiles: the p50
    cap = capacity if t.max_quota_gpus is None else min(capacity, t.max_quota_gpus)
    cap -= cap % s.node_gpus
    want = max(
        ceil_to_node(q * (1 + s.headroom), s.node_gpus),
        ceil_to_node(t.need_gpus, s.node_gpus),
        ceil_to_node(t.guaranteed_gpus, s.node_gpus),
    )
    return min(want, cap)


def _offer(t: TenantState, target: int, node: int) -> int:
    """GPUs a tenant lends: down to its damped target, idle nodes only, never below its
    guarantee nor below what it is forecast to need within a borrower's run time."""
    if target >= t.quota_gpus:
        return 0
    floor = max(target, ceil_to_node(t.guaranteed_gpus, node), ceil_to_node(t.hold_gpus, node))
    amount = min(t.idle_gpus, t.quota_gpus - floor)
    return max(0, amount - amount % node)


def _urgent(
    tenants: list[TenantState],
    damped: dict[str, int],
    lowest: dict[str, int],
    below: dict[str, bool],
    node: int,
) -> dict[str, int]:
    """First pass: tenants whose jobs wait now (need above quota) take idle nodes from any
    tenant down to that tenant's own need now (never below its guarantee, nor below
    ``lowest``, what its scale-down rate limit allows), whatever its forecast says:
    waiting jobs come before capacity kept for forecast demand. Nodes no one's forecast
    keeps are taken first, so a forecast loses capacity only when nothing else is idle."""
    want: dict[str, int] = {}
    spare: dict[str, int] = {}  # idle beyond the donor's damped target too
    kept: dict[str, int] = {}  # idle that only the donor's forecast keeps
    for t in tenants:
        need = ceil_to_node(t.need_gpus, node)
        w = min(damped[t.tenant], need) - t.quota_gpus
        if w > 0:
            want[t.tenant] = w
            continue
        # a donor keeps its need now, but never more than it may hold (``max_quota_gpus``
        # caps its damped target below its need): the rest is lent like any idle node
        kept_need = min(need, damped[t.tenant])
        keep = max(
            kept_need,
            ceil_to_node(t.guaranteed_gpus, node),
            ceil_to_node(t.hold_gpus, node),
            lowest[t.tenant],
        )
        amount = min(t.idle_gpus, t.quota_gpus - keep)
        amount = max(0, amount - amount % node)
        spare[t.tenant] = min(amount, _offer(t, damped[t.tenant], node))
        kept[t.tenant] = amount - spare[t.tenant]
    got = _match(want, spare, below, node)
    left = {r: w - got.get(r, 0) for r, w in want.items()}
    for r, d in _match(left, kept, below, node).items():
        got[r] = got.get(r, 0) + d
    return got


def _hold_back(offer: dict[str, int], gpus: int, node: int) -> None:
    """Withdraw ``gpus`` (whole nodes, largest offers first) from the offers to forecast
    receivers: idle nodes that jobs waiting now could not take in this plan (damping held
    their tenant back) stay free for them, so a forecast never takes what waiting jobs
    would take back in the next plan (a flap)."""
    while gpus > 0:
        donor = max((t for t in offer if offer[t] > 0), key=lambda t: offer[t], default=None)
        if donor is None:
            return
        offer[donor] -= node
        gpus -= node


def _return_home(
    tenants: list[TenantState],
    left: dict[str, int],
    got: dict[str, int],
    below: dict[str, bool],
    node: int,
) -> dict[str, int]:
    """Last pass: idle capacity a borrower (quota above its ``nominal_gpus``) still offers
    after the plan goes back to owners below their nominal quota, as a Kueue cohort
    releases borrowed quota: the owner then has it when its demand comes back, with no
    reclaim."""
    owed, back = {}, {}
    for t in tenants:
        if t.nominal_gpus is None:
            continue
        after = t.quota_gpus + got.get(t.tenant, 0)
        if after > t.nominal_gpus:
            amount = min(left.get(t.tenant, 0), after - t.nominal_gpus)
            back[t.tenant] = max(0, amount - amount % node)
        elif after < t.nominal_gpus:
            owed[t.tenant] = ceil_to_node(t.nominal_gpus - after, node)
            if t.max_quota_gpus is not None:  # never past its ceiling
                owed[t.tenant] = min(owed[t.tenant], floor_to_node(t.max_quota_gpus, node) - after)
    return _match(owed, back, below, node)


def _match(
    want: dict[str, int], offer: dict[str, int], below_guarantee: dict[str, bool], node: int
) -> dict[str, int]:
    """Move whole nodes from donors to receivers; returns tenant -> delta (sums to zero)."""
    receivers = [(not below_guarantee[t], -w, t) for t, w in want.items() if w > 0]
    donors = [(-o, t) for t, o in offer.items() if o > 0]
    heapq.heapify(receivers)
    heapq.heapify(donors)
    got: dict[str, int] = {}
    while receivers and donors:
        prio, neg_w, r = heapq.heappop(receivers)
        neg_o, d = heapq.heappop(donors)
        got[r] = got.get(r, 0) + node
        got[d] = got.get(d, 0) - node
        if -neg_w - node > 0:
            heapq.heappush(receivers, (prio, neg_w + node, r))
        if -neg_o - node > 0:
            heapq.heappush(donors, (neg_o + node, d))
    return got


def _explain(t: TenantState, desired: int, damped: int, delta: int) -> tuple[Reason, str]:
    q, cur = f"p90={t.p90:.1f} p50={t.p50:.1f} GPUs at {t.horizon_s:.0f}s", t.quota_gpus
    if delta > 0 and cur < t.guaranteed_gpus:
        return (
            "below_guarantee",
            f"{cur} -> {cur + delta} GPUs towards the guarantee {t.guaranteed_gpus}",
        )
    if delta > 0 and t.need_gpus > cur:
        beyond = f" and the forecast ({q})" if cur + delta > t.need_gpus else ""
        return (
            "waiting_jobs",
            f"{cur} -> {cur + delta} GPUs for the jobs running and waiting now "
            f"(need {t.need_gpus:.0f}){beyond}",
        )
    if delta > 0 and t.nominal_gpus is not None and cur + delta <= t.nominal_gpus and cur >= damped:
        return "returned", f"{cur} -> {cur + delta} GPUs: idle capacity it lent came back"
    if delta > 0 and cur + delta < damped:
        return "forecast_up_partial", (
            f"{cur} -> {cur + delta} GPUs ({q}; wanted {damped}, not enough idle nodes elsewhere)"
        )
    if delta > 0:
        return "forecast_up", f"{cur} -> {cur + delta} GPUs ({q})"
    if delta < 0:
        return "lend_idle", f"{cur} -> {cur + delta} GPUs: idle nodes lent ({q})"
    if damped > cur:
        return "no_donor", f"wants {damped} GPUs ({q}), but no tenant has idle nodes to lend"
    if damped < cur:  # nothing damped it: quota moves only to a tenant that takes it
        return "no_taker", (
            f"stays at {cur} GPUs: could go down to {damped} ({q}), but no tenant took its "
            f"idle nodes (none needs them, or none is idle)"
        )
    if desired != cur:
        return (
            "held",
            f"stays at {cur} GPUs: desired {desired} damped (tolerance, window, cooldown)",
        )
    return "steady", f"stays at {cur} GPUs ({q})"
