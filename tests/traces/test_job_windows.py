"""Windows of a jobs trace (``dprobe evaluate --format jobs-csv``): the time-averaged
demand and the job flow equal a reference recomputed job by job from the same records."""

from __future__ import annotations

import random

import pytest

from dprobe.models.job_flow import FlowSettings
from dprobe.traces.job_windows import job_windows
from dprobe.traces.jobs_csv import JobRecord

EDGES = (300.0, 3000.0)


def _bucket(value: float) -> int:
    return sum(1 for e in EDGES if value >= e)


def _jobs(seed: int) -> list[JobRecord]:
    rng = random.Random(seed)
    return [
        JobRecord(
            str(i),
            rng.choice(["vc_a", "vc_b"]),
            rng.choice([1, 2, 4, 8]),
            float(rng.randrange(0, 20_000)),
            float(rng.choice([30, 400, 2000, 9000])),
            "",
            i + 2,
        )
        for i in range(60)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_windows_match_a_job_by_job_reference(seed: int) -> None:
    jobs = _jobs(seed)
    w_s = 600.0
    got = {
        (w.tenant, w.window_start): w
        for w in job_windows(jobs, w_s, flow=FlowSettings(edges_s=EDGES))
    }
    starts = {float(k * w_s) for k in range(60)}
    for tenant in ("vc_a", "vc_b"):
        for start in sorted(starts):
            end = start + w_s
            mine = [j for j in jobs if j.tenant == tenant]
            gpu_s = sum(
                j.num_gpu * max(0.0, min(end, j.submit_s + j.duration_s) - max(start, j.submit_s))
                for j in mine
            )
            active = [j for j in mine if j.submit_s < end <= j.submit_s + j.duration_s]
            sub = [j for j in mine if start <= j.submit_s < end]
            fin = [j for j in mine if start <= j.submit_s + j.duration_s < end]
            if not (active or sub or fin):
                assert (tenant, start) not in got
                continue
            w = got[(tenant, start)]
            assert w.running_gpus == pytest.approx(gpu_s / w_s)
            assert w.pending_gpus == 0.0 and w.effective_demand_gpus == pytest.approx(gpu_s / w_s)
            f = w.flow
            assert f is not None
            ages = [0.0, 0.0, 0.0]
            for j in active:
                ages[_bucket(end - j.submit_s)] += j.num_gpu
            assert list(f.running_by_age) == ages
            assert (f.submitted_jobs, f.submitted_gpus) == (len(sub), sum(j.num_gpu for j in sub))
            assert (f.started_jobs, f.started_gpus) == (len(sub), sum(j.num_gpu for j in sub))
            assert (f.finished_jobs, f.finished_gpus) == (len(fin), sum(j.num_gpu for j in fin))
            durations = [0, 0, 0]
            for j in fin:
                durations[_bucket(j.duration_s)] += 1
            assert list(f.finished_by_duration) == durations
            assert sum(f.pending_by_wait) == 0.0
    windows = list(job_windows(jobs, w_s))
    assert [w.window_end for w in windows] == sorted(w.window_end for w in windows)
