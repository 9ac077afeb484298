"""Multi-level demand estimator: hand-computed effective demands under the settings."""

from __future__ import annotations

import re

import pytest

from dprobe.models.demand import PendingJob, RunningInstance, estimate_demand, pending_level
from dprobe.models.levels import LevelSettings
from dprobe.models.profiler import JobProfiler
from dprobe.models.profiles import Profile

GB = 1e9


def _profiler() -> JobProfiler:
    return JobProfiler().fit(
        [
            Profile("Tiny", 32, False, 10.0, 1000.0, params_m=1.0),
            Profile("Huge", 32, False, 95.0, 20000.0, params_m=300.0),
        ]
    )


def test_running_instances_are_weighted_by_level() -> None:
    running = [
        RunningInstance(gpu_util=10, mem_used_bytes=1 * GB),  # L1 0.3
        RunningInstance(gpu_util=50, mem_used_bytes=8 * GB),  # L2 0.5
        RunningInstance(gpu_util=90, sm_util=80, mem_used_bytes=8 * GB),  # L3 0.7
        RunningInstance(gpu_util=90, sm_util=40, mem_used_bytes=8 * GB),  # SM low -> L2 0.5
        RunningInstance(gpu_util=20, mem_used_bytes=75 * GB, mem_total_bytes=80 * GB),  # EX 1.0
    ]
    d = estimate_demand(running)
    assert d.level_counts == {"L1": 1, "L2": 2, "L3": 1, "EX": 1}
    assert d.running_effective_gpus == pytest.approx(0.3 + 0.5 + 0.7 + 0.5 + 1.0)
    assert d.running_instances == 5


def test_weights_and_thresholds_are_settings() -> None:
    s = LevelSettings(weight_l1=0.1, weight_l2=0.4, l1_max_util_pct=60.0)
    running = [RunningInstance(gpu_util=50, mem_used_bytes=1 * GB)]
    assert estimate_demand(running, settings=s).running_effective_gpus == pytest.approx(0.1)
    assert estimate_demand(running).running_effective_gpus == pytest.approx(0.5)


def test_pending_jobs_are_levelled_by_the_profiler() -> None:
    pending = [
        PendingJob(gpus=8, family="Huge", batch_size=32),  # L3: 8 * 0.7
        PendingJob(gpus=2, family="Tiny", batch_size=32),  # L1: 2 * 0.3
        PendingJob(gpus=4, exclusive=True),  # EX: 4 * 1.0
        PendingJob(gpus=0, family="Huge"),  # ignored
    ]
    d = estimate_demand([], pending, profiler=_profiler())
    assert d.pending_effective_gpus == pytest.approx(5.6 + 0.6 + 4.0)
    assert d.pending_gpus == 14
    assert d.pending_levels == {"L1": 2.0, "L2": 0.0, "L3": 8.0, "EX": 4.0}
    assert d.effective_demand_gpus == pytest.approx(10.2)


def test_unknown_pending_jobs_count_as_the_configured_level() -> None:
    job = PendingJob(gpus=8)
    assert pending_level(job, None) == "EX"
    assert pending_level(job, _profiler()) == "EX"  # profiler can only fall back
    assert pending_level(job, _profiler(), unknown_pending_level="L2") == "L2"
    d = estimate_demand([], [job], unknown_pending_level="L2")
    assert d.pending_effective_gpus == pytest.approx(4.0)


@pytest.mark.parametrize("level", ["ex", "L4", ""])
def test_an_unknown_level_that_is_no_level_is_refused_by_name(level: str) -> None:
    # "ex" failed as KeyError('ex') when a pending job was weighted, and pending_level
    # returned it as the job's level; an empty queue accepted it without a word
    message = f"unknown_pending_level must be one of L1, L2, L3, EX, not {level!r}"
    for pending in ([PendingJob(gpus=2)], []):
        with pytest.raises(ValueError, match=re.escape(message)):
            estimate_demand([], pending, unknown_pending_level=level)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape(message)):
        pending_level(PendingJob(gpus=1), None, level)  # type: ignore[arg-type]


def test_each_of_the_four_levels_is_an_unknown_level() -> None:
    weights = LevelSettings()
    for level in ("L1", "L2", "L3", "EX"):
        d = estimate_demand([], [PendingJob(gpus=2)], unknown_pending_level=level)
        assert d.pending_effective_gpus == pytest.approx(2 * weights.weight(level))
        assert d.pending_levels[level] == 2


@pytest.mark.parametrize("gpus", [float("nan"), float("inf")])
def test_a_pending_job_of_no_number_of_gpus_is_named(gpus: float) -> None:
    # a NaN or infinite request made the tenant's whole pending and effective demand NaN
    # or infinite, unsaid
    pending = [PendingJob(gpus=4, family="Tiny", batch_size=32), PendingJob(gpus=gpus)]
    message = f"a pending job's gpus must be a finite number (<= 0: ignored), not {gpus!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        estimate_demand([], pending, profiler=_profiler())


@pytest.mark.parametrize(
    "setting",
    [
        # a NaN threshold switched its rule off (every comparison with it is false), a
        # NaN or negative weight made the effective demand NaN or negative
        {"l3_min_util_pct": float("nan")},
        {"l1_max_mem_bytes": float("nan")},
        {"ex_min_mem_frac": float("nan")},
        {"weight_l2": float("nan")},
        {"weight_ex": float("inf")},
        {"weight_l1": -0.3},
    ],
)
def test_level_settings_that_are_no_numbers_are_named(setting: dict) -> None:
    (name,) = setting
    with pytest.raises(ValueError, match=re.escape(f"{name} must be a finite number >= 0")):
        LevelSettings(**setting)


@pytest.mark.parametrize(
    ("instance", "message"),
    [
        # a NaN util was levelled L2 and counted as half a GPU, unsaid
        (RunningInstance(gpu_util=float("nan"), mem_used_bytes=GB), "gpu_util must be a finite"),
        (RunningInstance(gpu_util=50, mem_used_bytes=float("inf")), "mem_used_bytes must be a"),
        (RunningInstance(gpu_util=50, mem_used_bytes=GB, sm_util=float("nan")), "sm_util must"),
    ],
)
def test_a_running_instance_whose_metrics_are_no_numbers_is_named(
    instance: RunningInstance, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(f"a running instance's {message}")):
        estimate_demand([RunningInstance(gpu_util=10, mem_used_bytes=GB), instance])
