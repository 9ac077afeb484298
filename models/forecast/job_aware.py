"""A job-aware forecaster: what still runs + what waits + what arrives and still runs.

A tenant's demand at ``T + h`` is made of jobs (DProbe's premise: a VC's GPU demand is
the jobs it runs and queues). From the job ``flow`` of each window
(:class:`~dprobe.schema.JobFlow`: running GPUs by age, queued GPUs, jobs submitted and
finished with their run times), per tenant and learned online:

- a **run-time distribution** as a hazard per run-time bucket: GPUs of jobs that
  finished at that run time, divided by the GPU-seconds that running jobs spent at that
  age (so jobs still running count as well as finished ones: long jobs are not missed
  while they run), both forgotten with a half-life of ``runtime_halflife_h`` hours of the
  tenant's windows, and shrunk towards the hazard of all tenants (a cluster-wide prior
  worth ``prior_gpu_h`` GPU-hours of exposure) and towards the hazard of the bucket below
  (worth ``carry_gpu_h`` GPU-hours: an age that jobs seldom reach keeps the hazard of
  the ages before it instead of a hazard of 0, which would make them run forever);
- an **arrival rate** of GPUs by hour of week (an exponential average per hour slot,
  ``arrival_alpha``), shrunk towards the tenant's overall rate until a slot has been seen
  ``prior_slot_windows`` times, and blended with the rate of the last hours (forgotten
  with a half-life of ``recent_halflife_h``) by ``recent_weight``: jobs come in bursts;

and from them, the expected demand at horizon ``h`` (the middle of the target window):

    E[D] = sum over running age buckets a of R_a * S(age_a + h) / S(age_a)
         + Q * S(h)
         + integral over the next h of lambda(t) * S(time left to the target) dt

with ``S`` the survival function of run times, ``R_a`` the GPUs running at age ``a``,
``Q`` the queued GPUs. The p90 adds ``spread_z`` standard deviations of a count model
(each running job survives independently; arrivals are compound Poisson with the tenant's
mean GPUs per job). p50 is that expectation.

**Assumptions** (all settings): the hazard is constant within a bucket (the last bucket's
hazard holds beyond it); a finished job's GPUs are the mean of the jobs that finished in
the window; a job of a running-age bucket has the bucket's log-middle age (the last
bucket: ``tail_factor`` times its lower edge); a queued job stays in demand at
least as long as a job that starts now (``S(h)``); arrivals depend on the hour of the
week and the rate of the last hours only. A window without a flow (a demand series
without jobs) is forecast as the last value, as
:class:`~dprobe.models.forecast.baselines.LastValue` does.

Example: a tenant that submits nothing more and whose jobs have never been seen to end
keeps what runs now; once jobs are seen ending after 10-40 minutes of running, what runs
at that age drains at the hazard learned there (16 GPUs finished over 38,400 GPU-seconds
at that age), and beyond 40 minutes at the hazard carried over from it:
    >>> from types import SimpleNamespace as W
    >>> from dprobe.models.job_flow import ActiveJob, FlowEvent, FlowSettings, job_flow
    >>> fs = FlowSettings(edges_s=(600.0, 2400.0))
    >>> def window(i, finished):
    ...     end = 600.0 * (i + 1)
    ...     events = [FlowEvent("finish", 8, run_s=1200.0)] * finished
    ...     flow = job_flow([ActiveJob(8, 0.0, end - 1200.0)] * 2, events, end=end, settings=fs)
    ...     return W(tenant="a", window_start=end - 600.0, window_end=end,
    ...              running_gpus=16.0, pending_gpus=0.0, flow=flow)
    >>> m = JobAware(prior_gpu_h=0.0)
    >>> for i in range(3):
    ...     m.learn_one(window(i, finished=0))
    >>> m.forecast("a", [3600.0])
    {3600.0: (16.0, 16.0)}
    >>> m.learn_one(window(3, finished=2))
    >>> p50, p90 = m.forecast("a", [3600.0])[3600.0]
    >>> round(p50, 1), round(p90, 1)
    (7.9, 10.4)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dprobe.models.forecast.per_tenant import PerTenantForecaster

HOUR_S = 3600.0
WEEK_HOURS = 168


def survival(hazard: Sequence[float], edges_s: Sequence[float], t: float) -> float:
    """P(run time > ``t``) for a hazard (per second) constant within each bucket.

    >>> round(survival([0.01, 0.001], [100.0], 50.0), 4)  # exp(-0.5)
    0.6065
    >>> round(survival([0.01, 0.001], [100.0], 300.0), 4)  # exp(-1 - 0.2)
    0.3012
    """
    if t <= 0:
        return 1.0
    acc, lo = 0.0, 0.0
    for b, rate in enumerate(hazard):
        hi = float(edges_s[b]) if b < len(edges_s) else math.inf
        acc += rate * (min(t, hi) - lo)
        if t <= hi:
            break
        lo = hi
    return math.exp(-acc)


def bucket_age(b: int, edges_s: Sequence[float], tail: float) -> float:
    """The age taken for a running job of age bucket ``b``: its log-middle.

    >>> bucket_age(0, [100.0], 4.0), bucket_age(1, [100.0], 4.0)
    (50.0, 200.0)
    """
    lo, hi = _bounds(b, edges_s)
    hi = lo * tail if hi is None else hi
    return hi / 2 if lo == 0 else math.sqrt(lo * hi)


class JobAware(PerTenantForecaster):
    """Demand from the tenant's jobs: survivors + queue + arrivals (see the module doc)."""

    name = "job-aware"
    version = "1"

    def __init__(
        self,
        *,
        runtime_halflife_h: float = 168.0,
        prior_gpu_h: float = 50.0,
        carry_gpu_h: float = 10.0,
        arrival_alpha: float = 0.1,
        prior_slot_windows: float = 3.0,
        recent_halflife_h: float = 2.0,
        recent_weight: float = 0.5,
        tail_factor: float = 2.0,
        spread_z: float = 1.2816,
        spread_alpha: float = 0.05,
    ) -> None:
        super().__init__(spread_z=spread_z, spread_alpha=spread_alpha)
        if not runtime_halflife_h > 0 or min(prior_gpu_h, carry_gpu_h, prior_slot_windows) < 0:
            raise ValueError("runtime_halflife_h must be > 0, the priors >= 0")
        if not 0 < arrival_alpha <= 1 or not tail_factor > 1:
            raise ValueError("arrival_alpha must be in (0, 1], tail_factor > 1")
        if not recent_halflife_h > 0 or not 0 <= recent_weight <= 1:
            raise ValueError("recent_halflife_h must be > 0, recent_weight in [0, 1]")
        self.runtime_halflife_h = runtime_halflife_h
        self.prior_gpu_h = prior_gpu_h
        self.carry_gpu_h = carry_gpu_h
        self.arrival_alpha = arrival_alpha
        self.prior_slot_windows = prior_slot_windows
        self.recent_halflife_h = recent_halflife_h
        self.recent_weight = recent_weight
        self.tail_factor = tail_factor
        # all tenants' finished GPUs and GPU-seconds of exposure by run-time bucket
        self._pool: dict[str, Any] = {"edges": [], "fin": [], "expo": []}

    # -- learning ---------------------------------------------------------------------
    def prototype(self, step_s: float) -> dict[str, Any]:
        return {
            "step": step_s,
            "flow": None,  # the newest window's jobs: edges, running by age, queued GPUs
            "fin": [],  # GPUs finished by run-time bucket (forgotten), over flow["edges"]
            "expo": [],  # GPU-seconds run at each age bucket (forgotten)
            "rate": [0.0] * WEEK_HOURS,  # GPUs submitted per second, by hour of week
            "seen": [0] * WEEK_HOURS,
            "mean_rate": 0.0,
            "recent_rate": 0.0,
            "n_rate": 0,
            "gpus_per_job": 1.0,
            "n_jobs": 0,
        }

    def observe(self, state: dict[str, Any], window: Any) -> None:
        flow = getattr(window, "flow", None)
        if flow is None:
            state["flow"] = None
            return
        edges = [float(e) for e in flow.edges_s]
        if state["flow"] is None or state["flow"]["edges"] != edges:
            state["fin"] = [0.0] * (len(edges) + 1)
            state["expo"] = [0.0] * (len(edges) + 1)
        state["flow"] = {
            "edges": edges,
            "running": [float(g) for g in flow.running_by_age],
            "queued": float(sum(flow.pending_by_wait)),
            "end": float(window.window_end),
        }
        step = float(state["step"])
        self._learn_hazard(state, flow, step)
        self._learn_hazard(self._pool_for(edges), flow, step)
        slot = _hour_of_week(float(window.window_end) - step / 2)
        rate = float(flow.submitted_gpus) / step
        a = max(self.arrival_alpha, 1.0 / (state["seen"][slot] + 1))
        state["rate"][slot] = (1 - a) * state["rate"][slot] + a * rate
        state["seen"][slot] += 1
        state["n_rate"] += 1
        # the overall rate: a plain mean over the first 100 windows, then forgotten slowly
        state["mean_rate"] += (rate - state["mean_rate"]) / min(state["n_rate"], 100)
        keep = 0.5 ** (step / (self.recent_halflife_h * HOUR_S))
        recent = state["recent_rate"]
        state["recent_rate"] = rate if state["n_rate"] == 1 else keep * recent + (1 - keep) * rate
        if flow.submitted_jobs > 0:  # a plain mean over the first 20 windows, then forgotten
            state["n_jobs"] += 1
            size = float(flow.submitted_gpus) / flow.submitted_jobs
            state["gpus_per_job"] += (size - state["gpus_per_job"]) / min(state["n_jobs"], 20)

    def _pool_for(self, edges: list[float]) -> dict[str, Any]:
        if self._pool["edges"] != edges:
            n = len(edges) + 1
            self._pool = {"edges": edges, "fin": [0.0] * n, "expo": [0.0] * n}
        return self._pool

    def _learn_hazard(self, acc: dict[str, Any], flow: Any, step: float) -> None:
        keep = 0.5 ** (step / (self.runtime_halflife_h * HOUR_S))
        size = float(flow.finished_gpus) / flow.finished_jobs if flow.finished_jobs else 0.0
        fin, expo = acc["fin"], acc["expo"]
        for b in range(len(fin)):
            fin[b] = fin[b] * keep + size * float(flow.finished_by_duration[b])
            expo[b] = expo[b] * keep + float(flow.running_by_age[b]) * step

    # -- forecasting ------------------------------------------------------------------
    def forecast(self, tenant: str, horizons: Sequence[float]) -> dict[float, tuple[float, float]]:
        """``{horizon_s: (p50, p90)}`` in GPUs; without a flow, the last value's."""
        state = self._tenants.get(tenant)
        if state is None or state["m"]["flow"] is None:
            return super().forecast(tenant, horizons)
        hazard = self._hazard(state["m"])
        return {h: self._from_jobs(state["m"], hazard, float(h)) for h in horizons}

    def _from_jobs(self, m: dict[str, Any], hazard: list[float], h: float) -> tuple[float, float]:
        tail = self.tail_factor
        flow, step = m["flow"], float(m["step"])
        edges = flow["edges"]
        ahead = max(h - step / 2, 0.0)  # the middle of the target window

        def surv(t: float) -> float:
            return survival(hazard, edges, t)

        mean = var = 0.0
        g = max(float(m["gpus_per_job"]), 1.0)
        for b, gpus in enumerate(flow["running"]):
            if gpus <= 0:
                continue
            age = bucket_age(b, edges, tail)
            alive = surv(age)
            p = surv(age + ahead) / alive if alive > 0 else 0.0
            mean += gpus * p
            var += gpus * g * p * (1 - p)
        p_queue = surv(ahead)
        mean += flow["queued"] * p_queue
        var += flow["queued"] * g * p_queue * (1 - p_queue)
        arrived = self._arrivals(m, flow["end"], ahead, surv)
        mean += arrived
        var += arrived * g
        mean = max(mean, 0.0)
        return mean, mean + self.spread_z * math.sqrt(var)

    def _hazard(self, m: dict[str, Any]) -> list[float]:
        """Finished GPUs per GPU-second by bucket, the tenant's shrunk towards the pool's."""
        prior, carry = self.prior_gpu_h * HOUR_S, self.carry_gpu_h * HOUR_S
        edges = m["flow"]["edges"]
        pool = self._pool if self._pool["edges"] == edges else None
        out: list[float] = []
        for b, (own_fin, own_expo) in enumerate(zip(m["fin"], m["expo"], strict=True)):
            fin, expo = own_fin, own_expo
            if pool is not None and pool["expo"][b] > 0:  # the other tenants' experience
                fin += prior * _hazard_of(pool["fin"][b], pool["expo"][b], b, edges)
                expo += prior
            if b > 0:  # an age seldom seen keeps the hazard of the age below
                fin += carry * out[-1]
                expo += carry
            out.append(_hazard_of(fin, expo, b, edges))
        return out

    def _arrivals(self, m: dict[str, Any], end: float, ahead: float, surv: Any) -> float:
        """Expected GPUs submitted in ``(end, end + ahead]`` and still running then."""
        if ahead <= 0:
            return 0.0
        n = max(1, min(48, math.ceil(ahead / min(float(m["step"]), HOUR_S))))
        dt = ahead / n
        total = 0.0
        for k in range(n):
            t = end + (k + 0.5) * dt
            total += self._rate(m, _hour_of_week(t)) * dt * surv(ahead - (k + 0.5) * dt)
        return total

    def _rate(self, m: dict[str, Any], slot: int) -> float:
        seen = m["seen"][slot]
        w = seen / (seen + self.prior_slot_windows) if seen else 0.0
        weekly = w * m["rate"][slot] + (1 - w) * m["mean_rate"]
        return float((1 - self.recent_weight) * weekly + self.recent_weight * m["recent_rate"])

    # -- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Learned state (plain data): the tenants', and the run times of all tenants."""
        state = super().state_dict()
        state["pool"] = {k: list(v) for k, v in self._pool.items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the learned state with ``state`` (as returned by :meth:`state_dict`)."""
        super().load_state_dict(state)
        pool = state.get("pool") or {"edges": [], "fin": [], "expo": []}
        self._pool = {k: list(v) for k, v in pool.items()}


def n_job_features(n_horizons: int) -> int:
    """Length of the vector :func:`job_features` returns."""
    return 2 * n_horizons + 1


def job_features(
    model: JobAware, window: Any, horizons_s: Sequence[float], now: float, scale: float
) -> np.ndarray:
    """Inputs for another model at ``window``'s end: per horizon, ``model``'s p50 change
    from ``now`` and p90 spread, divided by ``scale`` (clipped to +-10), then 1 if the
    window carried a job flow (all 0 if not). ``model`` must have learned ``window``.

    >>> from types import SimpleNamespace as W
    >>> job_features(JobAware(), W(tenant="a", flow=None), [600.0], 4.0, 4.0).tolist()
    [0.0, 0.0, 0.0]
    """
    out = np.zeros(n_job_features(len(horizons_s)), dtype=np.float32)
    if getattr(window, "flow", None) is None:
        return out
    fc = model.forecast(str(window.tenant), horizons_s)
    for i, h in enumerate(horizons_s):
        p50, p90 = fc[h]
        out[2 * i] = (p50 - now) / scale
        out[2 * i + 1] = (p90 - p50) / scale
    out[-1] = 1.0
    return np.clip(out, -10.0, 10.0)


def _bounds(b: int, edges: Sequence[float]) -> tuple[float, float | None]:
    """``[lo, hi)`` of bucket ``b`` over ``edges``; ``hi`` is None for the last bucket."""
    lo = 0.0 if b == 0 else float(edges[b - 1])
    return lo, (float(edges[b]) if b < len(edges) else None)


def _hazard_of(finished: float, exposure: float, b: int, edges: Sequence[float]) -> float:
    """Hazard of bucket ``b``: finished GPUs per GPU-second. Where jobs ended at ages no
    window end saw running, each counts half the bucket's width of exposure (its run
    time lay in the bucket; the last bucket's width taken as its lower edge)."""
    if exposure <= 0:
        lo, hi = _bounds(b, edges)
        exposure = finished * ((hi - lo if hi is not None else lo) / 2)
    return finished / exposure if exposure > 0 else 0.0


def _hour_of_week(ts: float) -> int:
    return int(ts // HOUR_S) % WEEK_HOURS
