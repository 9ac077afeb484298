"""The job-aware forecaster against references worked out independently: survival from a
hazard by numerical integration, and an M/M/infinity tenant whose expected demand at any
horizon has a closed form."""

from __future__ import annotations

import math
import random

import pytest

from dprobe.models.forecast.job_aware import JobAware, survival
from dprobe.traces.job_windows import job_windows
from dprobe.traces.jobs_csv import JobRecord

STEP = 600.0
MEAN_RUN_S = 3600.0  # exponential run times
GPUS = 4


def _poisson_jobs(tenant: str, rate_per_s: float, days: float, seed: int) -> list[JobRecord]:
    rng = random.Random(seed)
    jobs, t, i = [], 0.0, 0
    while True:
        t += rng.expovariate(rate_per_s)
        if t > days * 86_400:
            return jobs
        run = max(rng.expovariate(1 / MEAN_RUN_S), 1.0)
        jobs.append(JobRecord(f"{tenant}-{i}", tenant, GPUS, t, run, "", i + 2))
        i += 1


def test_survival_is_the_exponential_of_the_integrated_hazard() -> None:
    edges = [60.0, 600.0, 3600.0]
    hazard = [1e-3, 5e-4, 2e-4, 1e-4]
    for t in (0.0, 30.0, 60.0, 400.0, 2000.0, 3600.0, 20_000.0):
        n = 20_000  # midpoint rule over [0, t]
        rate = [hazard[sum(1 for e in edges if (k + 0.5) * t / n >= e)] for k in range(n)]
        expected = math.exp(-sum(rate) * t / n)
        assert survival(hazard, edges, t) == pytest.approx(expected, rel=1e-3)


def test_an_m_m_infinity_tenant_is_forecast_by_its_closed_form() -> None:
    # Poisson arrivals of 4-GPU jobs, exponential run times: at a window's end with D GPUs
    # running, E[D(T + h)] = D exp(-h / tau) + lambda g tau (1 - exp(-h / tau)), taken at
    # the middle of the target window.
    rate = 1 / 300.0  # a job every 5 minutes: 48 GPUs running on average
    windows = [  # while jobs come (the drain after the last submission is not M/M/inf)
        w
        for w in job_windows(_poisson_jobs("a", rate, days=10, seed=1), STEP)
        if w.window_end <= 10 * 86_400 - 21_600
    ]
    model = JobAware(prior_gpu_h=0.0, recent_weight=0.0)
    errors = []
    for w in windows[:-40]:
        model.learn_one(w)
    for w in windows[-40:]:
        model.learn_one(w)
        running = sum(w.flow.running_by_age)
        for h in (3600.0, 21_600.0):
            decay = math.exp(-(h - STEP / 2) / MEAN_RUN_S)
            expected = running * decay + rate * GPUS * MEAN_RUN_S * (1 - decay)
            p50, p90 = model.forecast("a", [h])[h]
            assert p90 > p50
            errors.append(abs(p50 - expected) / expected)
    assert max(errors) < 0.2
    assert sum(errors) / len(errors) < 0.1


def test_a_tenant_that_stops_submitting_drains() -> None:
    # three hours after its last submission, the rate of the last hours says little comes:
    # the forecast with it drains towards what still runs, the hour-of-week one does not
    windows = list(job_windows(_poisson_jobs("a", 1 / 300.0, days=5, seed=2), STEP))
    recent = JobAware(prior_gpu_h=0.0, recent_weight=1.0, recent_halflife_h=1.0)
    weekly = JobAware(prior_gpu_h=0.0, recent_weight=0.0)
    for w in windows:
        recent.learn_one(w)
        weekly.learn_one(w)
        if w.window_end > 5 * 86_400 + 3 * 3600:
            break
    assert w.flow is not None and w.flow.submitted_jobs == 0
    drained = recent.forecast("a", [21_600.0])[21_600.0][0]
    assert drained < 0.25 * (1 / 300.0) * GPUS * MEAN_RUN_S  # a quarter of the steady 48
    assert drained < 0.5 * weekly.forecast("a", [21_600.0])[21_600.0][0]


def test_a_young_tenant_borrows_the_run_times_of_the_others() -> None:
    model = JobAware(prior_gpu_h=50.0, recent_weight=0.0)
    old = list(job_windows(_poisson_jobs("old", 1 / 300.0, days=5, seed=3), STEP))
    young = list(job_windows(_poisson_jobs("new", 1 / 300.0, days=0.05, seed=4), STEP))
    for w in old:
        model.learn_one(w)
    for w in young:
        model.learn_one(w)
    fresh = JobAware(prior_gpu_h=50.0, recent_weight=0.0)
    for w in young:
        fresh.learn_one(w)
    # alone, the young tenant has seen few jobs end: it expects what runs to run long
    alone = fresh.forecast("new", [21_600.0])[21_600.0][0]
    pooled = model.forecast("new", [21_600.0])[21_600.0][0]
    steady = 1 / 300.0 * GPUS * MEAN_RUN_S
    assert abs(pooled - steady) < abs(alone - steady)
