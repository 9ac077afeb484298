"""The forecast-and-plan core: closed TenantWindows in, ScalingEvents out (no Kafka here).

:meth:`PlanLoop.plan_end` plans one window end from the windows that end there: the
forecaster learns them (in tenant order; a window at or before what its tenant has
already learned is a replayed duplicate and is skipped), then the loop asks it for
(p50, p90) at ``horizon_s`` for every tenant seen in the last ``tenant_ttl_windows``
windows and hands them to the :class:`~dprobe.models.planner.Planner`. Which ends are
ready, and in what order windows from several window partitions are planned, is the
stream's business (:mod:`dprobe.streams.plan_order`); a window that arrives for an end
already planned is only learned (:meth:`PlanLoop.learn`).

Quotas: the loop assumes its moves are applied (the scheduler consumes the events). What
the scheduler reports (:meth:`PlanLoop.on_cluster`, a ``ClusterReport``: the capacity and
each tenant's quota now) replaces the loop's own bookkeeping as it arrives: the newest
word wins. Reported GPUs are rounded down to whole nodes. Without a report, the capacity
is ``capacity_gpus`` and, at the first plan, it is split in whole nodes evenly between the
tenants seen (an assumption); a tenant that appears later starts at 0 and borrows idle
nodes. A tenant that holds quota but has sent nothing for ``tenant_ttl_windows`` windows
is planned as idle (its nodes can be lent). A tenant silent for ``forget_after_s`` (a
week) is forgotten: the forecaster's state of it, its forecasts and errors; its quota
stays until it holds none, then goes with its damping history; it is a new tenant if it
comes back. So memory and
checkpoints follow the tenants of the last week, not every tenant ever seen. Quotas the
loop only guessed that no longer fit a smaller capacity shrink in proportion to what each
holds, in whole nodes, to what the reported quotas leave; while reported quotas hold more
than the capacity, no tenant is raised past the capacity. A tenant whose windows change
length (a worker restarted with another ``window_s``) starts afresh in the forecaster.
A checkpoint saved under other cluster settings (``capacity_gpus``, ``node_gpus``,
``initial_quotas``) keeps its forecaster but not its quotas; one saved by another model
(its registered name) keeps the quotas but not the forecaster, which starts fresh (another
model's state would not fit it). The settings win, and the loop says what changed in
:attr:`PlanLoop.settings_changed`.

The same windows for each end and the same starting state give the same plans and the
same ``event_id``s, so a worker that restarts from its last checkpoint and replays the
windows since then re-emits identical events, which consumers drop.

Example:
    >>> from dprobe.models.forecast.baselines import LastValue
    >>> from dprobe.schema import LevelCounts, TenantWindow
    >>> loop = PlanLoop(LastValue(), PlanLoopSettings(capacity_gpus=32, horizon_s=600))
    >>> def w(t, end, run):
    ...     return TenantWindow(tenant=t, window_start=end - 60, window_end=end, hosts=1,
    ...         gpus_busy=run, instances=run, util_sum=0, level_counts=LevelCounts(),
    ...         effective_demand_gpus=run, pending_gpus=0, running_gpus=run)
    >>> events = loop.plan_end(60.0, [w("a", 60, 30.0), w("b", 60, 1.0)])
    >>> [(e.tenant, e.action, e.delta_gpus) for e in events]
    [('a', 'scale_up', 8.0), ('b', 'scale_down', -8.0)]
    >>> loop.plan_end(60.0, [])  # an end is planned once
    []
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dprobe.models.checkpoint import CheckpointError, first_line, load_state, save_state
from dprobe.models.forecast.base import Forecaster, forget
from dprobe.models.forecast.target import demand_of
from dprobe.models.planner import (
    PlanInput,
    Planner,
    PlannerSettings,
    TenantState,
    ceil_to_node,
    floor_to_node,
)
from dprobe.models.planner_events import scaling_events
from dprobe.schema import ClusterReport, ScalingEvent, TenantWindow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanLoopSettings:
    """Cluster and planning settings of the loop (all assumptions where the paper is silent)."""

    capacity_gpus: int = 64
    horizon_s: float = 3600.0
    hold_s: float = 0.0  # keep idle what a tenant's p90 needs within this long (0: off)
    guaranteed_gpus: int = 0
    initial_quotas: Mapping[str, int] = field(default_factory=dict)
    tenant_ttl_windows: int = 5
    forget_after_s: float = 7 * 86_400.0  # a tenant silent this long is forgotten (0: never)
    planner: PlannerSettings = field(default_factory=PlannerSettings)


@dataclass
class TenantSnapshot:
    """What the loop knows of one tenant, for dashboards."""

    demand_gpus: float
    effective_demand_gpus: float
    level_counts: dict[str, int]
    window_end: float
    forecast: dict[float, tuple[float, float]]
    quota_gpus: float | None
    abs_error: dict[float, float]


class PlanLoop:
    """Forecaster + planner driven by closed windows; see the module doc."""

    def __init__(self, forecaster: Forecaster, settings: PlanLoopSettings | None = None) -> None:
        self.forecaster = forecaster
        self.settings = settings or PlanLoopSettings()
        self.planner = Planner(self.settings.planner)
        self._learned: dict[str, float] = {}
        self._last: dict[str, TenantWindow] = {}
        self._planned_upto = -math.inf
        self._quotas: dict[str, int] = dict(self.settings.initial_quotas)
        self._forecasts: dict[str, dict[float, tuple[float, float]]] = {}
        # tenant -> {target time: (horizon, p50)}: forecasts whose outcome is not known yet
        self._outstanding: dict[str, dict[float, tuple[float, float]]] = {}
        self._errors: dict[str, dict[float, float]] = {}
        self._capacity: int | None = None  # the capacity the scheduler reported last
        self._reported: set[str] = set()  # tenants whose quota a report has set
        # a complete report said who holds what (maybe no one): no even split is guessed
        self._complete_reported = False
        # the source of the last complete report, and the tenants it and the reports since
        # gave a quota: a tenant that sends its first window outside them is warned of
        self._complete_source = ""
        self._named: set[str] = set()
        self._unnamed_new: list[str] = []  # such tenants since the last plan_end: told there
        self.settings_changed: str | None = None  # what load() found changed, if anything
        # forecasts that were NaN or infinite, planned as the tenant's demand now instead
        self.non_finite_forecasts = 0
        self.forgotten_tenants = 0  # tenants forgotten after forget_after_s of silence

    # -- the loop ---------------------------------------------------------------------
    def plan_end(self, end: float, windows: list[TenantWindow]) -> list[ScalingEvent]:
        """Learn the closed ``windows`` that end at ``end`` (tenant order), then plan
        ``end``; the events of the plan (none for an end at or before the last planned)."""
        for window in sorted(windows, key=lambda w: w.tenant):
            self.learn(window)
        left_out, self._unnamed_new = sorted(set(self._unnamed_new) - self._named), []
        if left_out:
            _warn_left_out(
                self._complete_source, left_out, self._named, windowed=set(self._learned)
            )
        if end <= self._planned_upto:
            return []
        self._forget_silent(end)
        events = self._plan(end)
        self._planned_upto = end
        return events

    def learn(self, window: TenantWindow) -> None:
        """Learn one closed window now (a straggler for an end already planned); one at or
        before what its tenant has learned is a replayed duplicate and is skipped, and so
        is one so old that its tenant would be forgotten at once."""
        if window.window_end <= self._learned.get(window.tenant, -math.inf):
            return
        if window.window_end <= self._forget_before(self._planned_upto):
            return
        last = self._last.get(window.tenant)
        if last is not None and _other_length(last, window):
            # the window length changed (a new window_s): the forecaster's history of this
            # tenant counts windows of the old length, so the tenant starts afresh
            forget(self.forecaster, window.tenant)
        self._score(window)
        self.forecaster.learn_one(window)
        first = window.tenant not in self._learned
        self._learned[window.tenant] = window.window_end
        if first and self._complete_reported and window.tenant not in self._named:
            self._unnamed_new.append(window.tenant)
        self._last[window.tenant] = window

    def on_cluster(self, report: ClusterReport) -> None:
        """Take what the scheduler reports: its capacity and quotas replace the loop's own
        from the next plan on (whole nodes, rounded down)."""
        node = self.settings.planner.node_gpus
        if report.capacity_gpus is not None:
            self._capacity = floor_to_node(report.capacity_gpus, node)
        if report.complete:
            windowed = set(self._learned)
            left_out = sorted(windowed - set(report.quotas))
            _warn_left_out(report.source, left_out, set(report.quotas), windowed=windowed)
            self._complete_reported = True
            self._complete_source = report.source
            self._named = set()
            for t in set(self._quotas) - set(report.quotas):
                self._quotas[t] = 0
                self._reported.add(t)
        for t, q in report.quotas.items():
            self._quotas[t] = floor_to_node(q, node)
            self._reported.add(t)
            self._named.add(t)

    @property
    def capacity_gpus(self) -> int:
        """The capacity plans share: the scheduler's last report, else the setting."""
        return self.settings.capacity_gpus if self._capacity is None else self._capacity

    def _forget_silent(self, at: float) -> None:
        """Forget the tenants whose last window ended ``forget_after_s`` or more before
        ``at``; a forgotten tenant's quota stays until it holds none (its nodes are its
        own to lend), then it goes with its damping history."""
        before = self._forget_before(at)
        if before == -math.inf:
            return
        gone = sorted(t for t, end in self._learned.items() if end <= before)
        if gone:
            self.forgotten_tenants += len(gone)
            log.info(
                "forgot %d tenant(s) without a window for %g s: %s%s",
                len(gone), self.settings.forget_after_s, ", ".join(gone[:10]),
                " ..." if len(gone) > 10 else "",
            )  # fmt: skip
        for t in gone:
            forget(self.forecaster, t)
            for kept in (
                self._learned,
                self._last,
                self._forecasts,
                self._outstanding,
                self._errors,
            ):
                kept.pop(t, None)
            if t not in self._quotas:  # its quota went with a change of cluster settings
                self.planner.forget(t)
        for t in [t for t, q in self._quotas.items() if q == 0 and t not in self._learned]:
            del self._quotas[t]
            self._reported.discard(t)
            self.planner.forget(t)

    def _forget_before(self, at: float) -> float:
        """Windows ending at or before this are too old to keep at ``at`` (``-inf``: the
        loop never forgets)."""
        forget_s = self.settings.forget_after_s
        return at - forget_s if forget_s > 0 else -math.inf

    def _active(self, at: float) -> list[str]:
        ttl = self.settings.tenant_ttl_windows
        out = []
        for t, w in self._last.items():
            length = max(w.window_end - w.window_start, 1e-9)
            if at - w.window_end < ttl * length:
                out.append(t)
        return sorted(out)

    def _plan(self, at: float) -> list[ScalingEvent]:
        s = self.settings
        node = s.planner.node_gpus
        active = self._active(at)
        if not active:
            return []
        if not self._quotas and not self._complete_reported:
            self._quotas = _even_split(active, self.capacity_gpus, node)
        self._fit_guesses()
        # tenants silent for a while that still hold quota: planned as idle, so they lend
        seen = set(active)
        quiet = sorted(t for t, q in self._quotas.items() if q > 0 and t not in seen)
        states = []
        h = s.horizon_s
        asked = sorted({h, s.hold_s}) if s.hold_s > 0 else [h]
        for t in active:
            w = self._last[t]
            out = self.forecaster.forecast(t, asked)
            p50, p90 = out[h]
            hold = max(v[1] for k, v in out.items() if k <= s.hold_s) if s.hold_s > 0 else 0.0
            if not all(math.isfinite(x) for x in (p50, p90, hold)):
                # a diverged model: this tenant is planned on its demand now, as last value
                self.non_finite_forecasts += 1
                p50 = p90 = hold = max(demand_of(w), 0.0)
            self._forecasts[t] = {h: (p50, p90)}
            self._outstanding.setdefault(t, {})[at + h] = (h, p50)
            quota = self._quotas.setdefault(t, 0)
            # busy: the whole nodes its running GPUs fill (an assumption: a quota is a GPU
            # count, as in Kueue or Volcano, whose jobs the scheduler packs; where a quota
            # is a pool of physical nodes, a node any job runs on cannot be lent)
            busy = ceil_to_node(max(w.running_gpus, 0.0), node)
            states.append(
                TenantState(
                    tenant=t,
                    quota_gpus=quota,
                    guaranteed_gpus=min(s.guaranteed_gpus, quota),
                    idle_gpus=max(0, quota - busy),
                    p50=max(0.0, p50),
                    p90=max(0.0, p90, p50),
                    horizon_s=h,
                    need_gpus=float(ceil_to_node(max(demand_of(w), 0.0), node)),
                    hold_gpus=max(0.0, hold),
                    nominal_gpus=s.initial_quotas.get(t),
                )
            )
        for t in quiet:
            quota = self._quotas[t]
            guaranteed = min(s.guaranteed_gpus, quota)
            states.append(
                TenantState(
                    tenant=t,
                    quota_gpus=quota,
                    guaranteed_gpus=guaranteed,
                    idle_gpus=quota,
                    horizon_s=h,
                    nominal_gpus=s.initial_quotas.get(t),
                )
            )
        states.sort(key=lambda st: st.tenant)
        capacity = max(self.capacity_gpus, sum(st.quota_gpus for st in states))
        if capacity > self.capacity_gpus:
            # reported quotas hold more than the capacity: none is raised past the capacity
            states = [
                replace(st, max_quota_gpus=max(self.capacity_gpus, st.guaranteed_gpus))
                for st in states
            ]
        plan = self.planner.plan(PlanInput(ts=at, capacity_gpus=capacity, tenants=tuple(states)))
        self._quotas.update(plan.targets())
        name = getattr(self.forecaster, "name", type(self.forecaster).__name__)
        version = getattr(self.forecaster, "version", "0")
        return scaling_events(plan, model_name=name, model_version=version, window_end=at)

    def _fit_guesses(self) -> None:
        """Quotas the loop only guessed (no report set them) that no longer fit the
        capacity shrink in proportion to what each holds, in whole nodes, to what the
        reported quotas leave (a tenant that holds none gets none)."""
        capacity = self.capacity_gpus
        if sum(self._quotas.values()) <= capacity:
            return
        node = self.settings.planner.node_gpus
        reported = {t: q for t, q in self._quotas.items() if t in self._reported}
        guessed = {t: q for t, q in self._quotas.items() if t not in self._reported}
        left = max(0, capacity - sum(reported.values()))
        self._quotas = {**reported, **_shrink(guessed, left, node)}

    def _score(self, window: TenantWindow) -> None:
        """Realised error of forecasts whose target time this window reaches."""
        mine = self._outstanding.get(window.tenant)
        if not mine:
            return
        errors = self._errors.setdefault(window.tenant, {})
        for target in [at for at in mine if at <= window.window_end]:
            h, p50 = mine.pop(target)
            errors[h] = abs(p50 - demand_of(window))
        for h in [h for h in errors if h != self.settings.horizon_s]:
            del errors[h]  # a horizon of before a restart with another: no longer forecast

    # -- views and state --------------------------------------------------------------
    @property
    def planned_upto(self) -> float:
        """End of the last window end planned (``-inf`` before the first plan)."""
        return self._planned_upto

    def quotas(self) -> dict[str, int]:
        return dict(self._quotas)

    def tenants(self) -> dict[str, TenantSnapshot]:
        """Per tenant seen recently: last window, forecasts, quota, realised error."""
        at = max((w.window_end for w in self._last.values()), default=0.0)
        out = {}
        for t in self._active(at):
            w = self._last[t]
            out[t] = TenantSnapshot(
                demand_gpus=demand_of(w),
                effective_demand_gpus=w.effective_demand_gpus,
                level_counts={k: getattr(w.level_counts, k) for k in ("L1", "L2", "L3", "EX")},
                window_end=w.window_end,
                forecast=dict(self._forecasts.get(t, {})),
                quota_gpus=float(self._quotas[t]) if t in self._quotas else None,
                abs_error=dict(self._errors.get(t, {})),
            )
        return out

    def state_dict(self) -> dict[str, Any]:
        from dprobe.schema import to_builtins

        return {
            "forecaster": self.forecaster.state_dict(),
            "planner": self.planner.state_dict(),
            "learned": dict(self._learned),
            "last": {t: to_builtins(w) for t, w in self._last.items()},
            "planned_upto": self._planned_upto,
            "quotas": dict(self._quotas),
            "forecasts": {
                t: {h: list(v) for h, v in f.items()} for t, f in self._forecasts.items()
            },
            "outstanding": [
                [t, at, h, p] for t, due in self._outstanding.items() for at, (h, p) in due.items()
            ],
            "errors": {t: dict(e) for t, e in self._errors.items()},
            "capacity": self._capacity,
            "reported": sorted(self._reported),
            "complete_reported": self._complete_reported,
            "complete_source": self._complete_source,
            "named": sorted(self._named),
            "cluster_settings": self._cluster_settings(),
            "forecaster_name": self._forecaster_name(),
        }

    def _forecaster_name(self) -> str:
        return str(getattr(self.forecaster, "name", type(self.forecaster).__name__))

    def _cluster_settings(self) -> dict[str, Any]:
        """The settings saved quotas depend on: a checkpoint made under others loses them."""
        s = self.settings
        return {
            "capacity_gpus": s.capacity_gpus,
            "node_gpus": s.planner.node_gpus,
            "initial_quotas": dict(sorted(s.initial_quotas.items())),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import msgspec

        saved_model = state.get("forecaster_name")
        other_model = saved_model is not None and saved_model != self._forecaster_name()
        if not other_model:  # another model's state would not fit this one: it starts fresh
            self.forecaster.load_state_dict(state["forecaster"])
        self.planner.load_state_dict(state["planner"])
        self._learned = dict(state["learned"])
        self._last = {t: msgspec.convert(w, TenantWindow) for t, w in state["last"].items()}
        self._planned_upto = state["planned_upto"]
        self._quotas = dict(state["quotas"])
        self._forecasts = {
            t: {float(h): (v[0], v[1]) for h, v in f.items()} for t, f in state["forecasts"].items()
        }
        self._outstanding = {}
        for t, at, h, p in state["outstanding"]:
            self._outstanding.setdefault(t, {})[at] = (h, p)
        self._errors = {
            t: {float(h): e for h, e in es.items()} for t, es in state["errors"].items()
        }
        capacity = state.get("capacity")
        self._capacity = None if capacity is None else int(capacity)
        self._reported = set(state.get("reported", ()))
        self._complete_reported = bool(state.get("complete_reported", False))
        self._complete_source = str(state.get("complete_source", ""))
        # a checkpoint from before this was kept: the tenants reports set stand in for it
        self._named = set(state.get("named", self._reported))
        self.settings_changed = None
        saved = state.get("cluster_settings")
        if saved is not None and saved != self._cluster_settings():
            self.settings_changed = _describe_changes(saved, self._cluster_settings())
            self._quotas = dict(self.settings.initial_quotas)
            self._capacity = None
            self._reported = set()
            self._complete_reported = False
            self._complete_source, self._named = "", set()
            # a tenant forgotten while it held quota goes now that its quota is gone
            for t in set(self.planner.state_dict()["history"]) - set(self._learned):
                if t not in self._quotas:
                    self.planner.forget(t)
        if other_model:
            change = f"model {saved_model!r} -> {self._forecaster_name()!r}"
            self.settings_changed = ", ".join(c for c in (self.settings_changed, change) if c)
            self._forecasts, self._outstanding, self._errors = {}, {}, {}

    def save(self, path: Path) -> None:
        """Checkpoint to ``path`` atomically (temporary file, fsync, rename)."""
        save_state(self.state_dict(), path)

    def load(self, path: Path) -> bool:
        """Warm-start from a checkpoint written by :meth:`save`; False when there is none.

        The file is read as data only (never as code);
        :class:`~dprobe.models.checkpoint.CheckpointError` if it is not such a checkpoint,
        or one of another forecaster or settings (the loop is then left as it was).
        """
        if not path.exists():
            return False
        state = load_state(path)
        fresh = self.state_dict()
        try:
            self.load_state_dict(state)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
            self.load_state_dict(fresh)  # nothing half-loaded stays
            raise CheckpointError(
                f"{path}: does not fit this forecaster or its settings ({first_line(exc)})"
            ) from exc
        return True


def _other_length(before: TenantWindow, now: TenantWindow) -> bool:
    """Whether two windows that both state a length state different ones (1 % apart).

    >>> from dprobe.schema import LevelCounts
    >>> def w(start, end):
    ...     return TenantWindow(tenant="a", window_start=start, window_end=end, hosts=1,
    ...         gpus_busy=0, instances=0, util_sum=0, level_counts=LevelCounts(),
    ...         effective_demand_gpus=0, pending_gpus=0, running_gpus=0)
    >>> _other_length(w(0, 60), w(60, 120)), _other_length(w(0, 60), w(300, 600))
    (False, True)
    """
    a = before.window_end - before.window_start
    b = now.window_end - now.window_start
    return a > 0 and b > 0 and abs(a - b) > 0.01 * max(a, b)


def _warn_left_out(
    source: str, left_out: list[str], named: set[str], *, windowed: set[str]
) -> None:
    """Log when a complete report from ``source`` leaves out tenants that send windows
    (``left_out``; when it comes, or at a tenant's first window after it): they hold no
    quota, which is right for a tenant the scheduler has no queue for, and wrong when the
    report names tenants otherwise (a ClusterQueue's name for a VC's). ``named``: the
    tenants it (and the reports since) gave a quota."""
    if not left_out:
        return
    unknown = sorted(named - windowed)
    log.warning(
        "complete cluster report from %s gives no quota to %d tenant(s) that send windows: "
        "%s%s; they hold 0 GPUs from now on%s",
        source, len(left_out), ", ".join(left_out[:10]),
        " ..." if len(left_out) > 10 else "",
        f" (it names {', '.join(unknown[:10])}, which no window names: does the report "
        "name tenants as the collectors do?)" if unknown else "",
    )  # fmt: skip


def _describe_changes(saved: dict[str, Any], now: dict[str, Any]) -> str:
    """``"capacity_gpus 64 -> 16"``: the cluster settings that differ, old -> new."""
    return ", ".join(f"{k} {saved.get(k)!r} -> {v!r}" for k, v in now.items() if saved.get(k) != v)


def _shrink(quotas: dict[str, int], capacity: int, node: int) -> dict[str, int]:
    """``quotas`` scaled down to at most ``capacity`` in whole nodes, largest remainders
    first (ties by name): ``_shrink({"a": 48, "b": 16}, 32, 8) -> {"a": 24, "b": 8}``."""
    nodes = {t: q // node for t, q in quotas.items()}
    total = sum(nodes.values())
    room = capacity // node
    if total <= room:
        return dict(quotas)
    shares = {t: n * room / total for t, n in nodes.items()}
    out = {t: math.floor(x) for t, x in shares.items()}
    spare = room - sum(out.values())
    for t in sorted(shares, key=lambda t: (out[t] - shares[t], t))[:spare]:
        out[t] += 1
    return {t: n * node for t, n in sorted(out.items())}


def _even_split(tenants: list[str], capacity: int, node: int) -> dict[str, int]:
    nodes = capacity // node
    base, extra = divmod(nodes, len(tenants))
    return {t: (base + (1 if i < extra else 0)) * node for i, t in enumerate(tenants)}
