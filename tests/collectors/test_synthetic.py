"""SyntheticBackend: seeded, clock-driven, profile-bounded, with a daily rhythm."""

from __future__ import annotations

import statistics

import pytest

from dprobe.clock import ManualClock
from dprobe.collectors.synthetic import GIB, MIB, SyntheticBackend
from dprobe.models.profiles import SYNTHETIC, shipped_profiles

T0 = 1_700_006_400.0  # Wednesday 2023-11-15 00:00 UTC


def run(backend: SyntheticBackend, start: float, ticks: int, step: float) -> list:
    return [backend.read_at(start + i * step) for i in range(ticks)]


def fingerprint(readings: list) -> list:
    return [
        (
            [(g.uuid, g.util, g.mem_used) for g in r.gpus],
            [(p.pid, p.tenant, p.job, p.sm_util, p.mem_used) for p in r.procs],
        )
        for r in readings
    ]


def test_same_seed_and_clock_give_the_same_readings() -> None:
    a = run(SyntheticBackend(seed=7), T0, 50, 60.0)
    b = run(SyntheticBackend(seed=7), T0, 50, 60.0)
    c = run(SyntheticBackend(seed=8), T0, 50, 60.0)
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)


async def test_read_uses_the_injected_clock() -> None:
    clock = ManualClock(start=T0)
    backend = SyntheticBackend(seed=1, clock=clock)
    first = await backend.read()
    clock.advance(3 * 3600)
    later = await backend.read()
    twin = SyntheticBackend(seed=1)
    assert fingerprint([first, later]) == fingerprint(
        [twin.read_at(T0), twin.read_at(T0 + 3 * 3600)]
    )


def test_jobs_arrive_and_finish_over_a_day() -> None:
    backend = SyntheticBackend(seed=3, gpus=8, procs_per_gpu=2)
    jobs_per_tick = [{p.job for p in r.procs} for r in run(backend, T0, 24 * 12, 300.0)]
    seen = set().union(*jobs_per_tick)
    finished = jobs_per_tick[0] - jobs_per_tick[-1]
    started = jobs_per_tick[-1] - jobs_per_tick[0]
    assert finished and started
    assert len(seen) > len(jobs_per_tick[0]) + 5


def test_values_stay_within_the_shipped_profiles_plus_noise() -> None:
    table = {(p.family, p.batch_size, p.amp): p for p in shipped_profiles(SYNTHETIC)}
    mem_hi: dict[str, float] = {}
    for (family, _, _), prof in table.items():
        mem_hi[family] = max(mem_hi.get(family, 0.0), prof.gpu_mem_mb * MIB)
    backend = SyntheticBackend(seed=5, gpus=8, procs_per_gpu=4, gpu_mem_gib=80)
    readings = run(backend, T0, 200, 30.0)
    ratios = []
    for r in readings:
        for g in r.gpus:
            assert 0 <= g.util <= 100 and 0 <= g.mem_used <= g.mem_total == 80 * GIB
        for p in r.procs:
            prof = table[(p.model, p.batch_size, p.amp)]
            assert 0 <= p.sm_util <= 100
            # memory never exceeds the family's measured maximum plus the CUDA context
            assert p.mem_used <= mem_hi[p.model] + 0.5 * GIB + 1
            if p.sm_util > 0.7 * prof.gpu_util_pct:  # running (start-up and pauses are lower)
                ratios.append(p.sm_util / prof.gpu_util_pct)
    # noise is centred: busy processes sit on their profile's steady value
    assert len(ratios) > 100
    assert statistics.median(ratios) == pytest.approx(1.0, abs=0.08)


def test_processes_have_idle_phases() -> None:
    backend = SyntheticBackend(seed=11, gpus=8, procs_per_gpu=2, interactive_share=0.0)
    idle = busy = 0
    for r in run(backend, T0, 400, 30.0):
        for p in r.procs:
            if p.model in {"ResNet50", "BERT"}:  # families that run near 100 % when busy
                idle += p.sm_util < 10
                busy += p.sm_util > 60
    assert busy > 0 and idle > 0
    assert 0.02 < idle / (idle + busy) < 0.5


def test_rhythm_peaks_at_the_tenants_hour_and_drops_at_weekends() -> None:
    backend = SyntheticBackend(tenants=["vc-a", "vc-b"], seed=2)
    for k, peak_h in enumerate((10, 15)):  # tenant k peaks at 10 + 5k UTC
        hours = [backend.rhythm(k, T0 + h * 3600) for h in range(24)]
        assert max(range(24), key=lambda h: hours[h]) == peak_h
        assert min(range(24), key=lambda h: hours[h]) == (peak_h + 12) % 24
        saturday = T0 + 3 * 86_400 + peak_h * 3600
        assert backend.rhythm(k, saturday) == pytest.approx(0.6 * hours[peak_h])


def test_more_jobs_start_near_the_peak_than_near_the_trough() -> None:
    backend = SyntheticBackend(
        tenants=["vc-a"], seed=4, gpus=64, procs_per_gpu=8, jobs_per_gpu_hour=2.0, mean_job_s=900.0
    )
    first_seen: dict[str, float] = {}
    for r_t in range(3 * 24 * 12):  # three weekdays, 5-minute ticks
        t = T0 + r_t * 300.0
        for p in backend.read_at(t).procs:
            first_seen.setdefault(p.job, t)
    by_hour = [0] * 24
    for t in first_seen.values():
        by_hour[int((t % 86_400) // 3600)] += 1
    peak = sum(by_hour[8:13])  # around 10:00
    trough = sum(by_hour[20:24]) + by_hour[0]  # around 22:00
    assert peak > 2 * trough


def test_saturate_fills_every_slot() -> None:
    backend = SyntheticBackend(gpus=8, procs_per_gpu=8, saturate=True, seed=0)
    r = backend.read_at(T0)
    assert len(r.gpus) == 8 and len(r.procs) == 64
    assert {sum(p.gpu == g.uuid for p in r.procs) for g in r.gpus} == {8}


def test_rejects_nonsense_arguments() -> None:
    with pytest.raises(ValueError):
        SyntheticBackend(tenants=[])
    with pytest.raises(ValueError):
        SyntheticBackend(gpus=0)


def test_a_family_without_every_configuration_is_refused() -> None:
    gap = ("VGG", 64, True)
    rows = [p for p in shipped_profiles(SYNTHETIC) if (p.family, p.batch_size, p.amp) != gap]
    with pytest.raises(ValueError, match="VGG"):
        SyntheticBackend(profiles=rows)
    only = SyntheticBackend(profiles=rows, family_shares={"BERT": 1.0}, seed=0)
    assert {p.model for p in only.read_at(T0).procs} <= {"BERT"}
