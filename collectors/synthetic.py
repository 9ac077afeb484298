"""A seeded synthetic GPU workload: tenants, jobs and their processes on one host.

It stands in for NVML in the demo, in tests and in benchmarks. Jobs of several tenants
arrive at a rate that follows a daily rhythm (each tenant peaks at its own hour, less at
weekends), run on 1-8 GPUs for a log-normally distributed time and finish. Each job is a
model configuration from a profile table (by default the shipped synthetic table of
:mod:`dprobe.models.profiles`, summarised from the Lucid profiles), so its steady
utilisation and memory are realistic; on top of that each process has a start-up phase
(data loading, memory ramping up), periodic idle phases (evaluation, checkpoints), and
AR(1) noise. A share of jobs are interactive and mostly idle. Everything is drawn from
one ``random.Random(seed)``: the same seed and the same sequence of clock readings give
the same readings. Time comes from the injected clock, so an
:class:`~dprobe.clock.AcceleratedClock` runs days in minutes.

The rhythm, job sizes, durations, phase lengths and how common each model family is
(:data:`FAMILY_SHARES`) are assumptions of this generator (plausible for a shared
training cluster), not measurements; they are constructor arguments.

Example:
    >>> import asyncio
    >>> from dprobe.clock import ManualClock
    >>> backend = SyntheticBackend(host="h1", tenants=["vc-a", "vc-b"], gpus=8, seed=0,
    ...                            clock=ManualClock(start=1_700_000_000.0))
    >>> reading = asyncio.run(backend.read())
    >>> len(reading.gpus), all(p.tenant in {"vc-a", "vc-b"} for p in reading.procs)
    (8, True)
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dprobe.clock import Clock, SystemClock
from dprobe.collectors.backend import GpuReading, ProcReading, Reading
from dprobe.lifecycle import AsyncResource
from dprobe.models.profiles import SYNTHETIC, Profile, shipped_profiles

GIB = 1 << 30
MIB = 1 << 20
# How common each model family is among the jobs of a shared training cluster (an
# assumption of this generator, not part of the profiles).
FAMILY_SHARES: Mapping[str, float] = {
    "BERT": 0.10,
    "DCGAN": 0.05,
    "EfficientNet": 0.06,
    "LSTM": 0.06,
    "MobileNetV2": 0.06,
    "MobileNetV3": 0.06,
    "NeuMF": 0.05,
    "PPO": 0.05,
    "PointNet": 0.05,
    "ResNet18": 0.10,
    "ResNet50": 0.14,
    "TD3": 0.04,
    "Transformer": 0.12,
    "VGG": 0.06,
}
_DAY_S = 86_400.0
_WIDTHS = (1, 2, 4, 8)
_WIDTH_P = (0.6, 0.15, 0.1, 0.15)
_CONTEXT_BYTES = 512 * 1024 * 1024  # CUDA context and allocator slack per process


@dataclass(frozen=True, slots=True)
class SyntheticJob:
    """A running synthetic job, as a scheduler would know it (for JobEvents in demos)."""

    job: str
    tenant: str
    gpus: int
    model: str
    batch_size: int
    amp: bool
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class _Family:
    """One model family's profile rows, with its batch sizes and precisions in table order."""

    name: str
    batch_sizes: tuple[int, ...]
    amp: tuple[bool, ...]
    rows: Mapping[tuple[int, bool], Profile]

    @classmethod
    def of(cls, name: str, rows: Sequence[Profile]) -> _Family:
        mine = [r for r in rows if r.family == name]
        if not mine:
            raise ValueError(f"no profile of model family {name!r}")
        by_config = {(r.batch_size, r.amp): r for r in mine}
        family = cls(
            name=name,
            batch_sizes=tuple(dict.fromkeys(r.batch_size for r in mine)),
            amp=tuple(dict.fromkeys(r.amp for r in mine)),
            rows=by_config,
        )
        missing = [
            (b, a) for b in family.batch_sizes for a in family.amp if (b, a) not in by_config
        ]
        if missing:
            raise ValueError(f"model family {name!r}: no profile for (batch, amp) {missing}")
        return family


@dataclass(slots=True)
class _Proc:
    pid: int
    gpu: int
    noise: float = 0.0


@dataclass(slots=True)
class _Job:
    job_id: str
    tenant: str
    profile: Profile
    mem_bytes: float
    start: float
    end: float
    interactive: bool
    startup_s: float
    pause_every_s: float
    pause_s: float
    procs: list[_Proc] = field(default_factory=list)


class SyntheticBackend(AsyncResource):
    """Synthetic readings of one host with ``gpus`` GPUs shared by ``tenants``.

    Args:
        host: host name (also seeds the GPU UUIDs).
        tenants: tenant names; tenant ``k`` gets weight ``1/(k+1)`` and peaks at its own
            hour of the day.
        gpus: number of GPUs.
        seed: seed of every random draw.
        clock: time source (default: the wall clock).
        procs_per_gpu: how many processes may share one GPU.
        jobs_per_gpu_hour: mean job arrivals per GPU per hour at the daily mean.
        mean_job_s: mean job duration (log-normal, sigma 1).
        interactive_share: share of jobs that are interactive and mostly idle.
        saturate: keep every process slot busy (benchmarks, load tests).
        gpu_mem_gib / gpu_tdp_w / gpu_name: the simulated GPU model.
        profiles: the profile table jobs are drawn from (default: the shipped
            :data:`~dprobe.models.profiles.SYNTHETIC` table); a row's ``mem_util_pct`` is
            the job's memory-bandwidth utilisation (0 when missing).
        family_shares: how common each family is (default :data:`FAMILY_SHARES`); the
            table needs every (batch size, AMP) pair of each family named here.
    """

    name = "synthetic"

    def __init__(
        self,
        host: str = "h1",
        tenants: Sequence[str] = ("vc-a", "vc-b", "vc-c", "vc-d"),
        gpus: int = 8,
        seed: int = 0,
        clock: Clock | None = None,
        *,
        procs_per_gpu: int = 2,
        jobs_per_gpu_hour: float = 0.5,
        mean_job_s: float = 4 * 3600.0,
        interactive_share: float = 0.1,
        saturate: bool = False,
        gpu_mem_gib: float = 80.0,
        gpu_tdp_w: float = 400.0,
        gpu_name: str = "NVIDIA A100-SXM4-80GB",
        profiles: Sequence[Profile] | None = None,
        family_shares: Mapping[str, float] = FAMILY_SHARES,
    ) -> None:
        if not tenants:
            raise ValueError("at least one tenant is needed")
        if gpus < 1 or procs_per_gpu < 1:
            raise ValueError("gpus and procs_per_gpu must be >= 1")
        if not family_shares:
            raise ValueError("at least one model family is needed")
        self.host = host
        self.tenants = tuple(tenants)
        self.gpus = gpus
        self.seed = seed
        self.clock: Clock = clock or SystemClock()
        self.procs_per_gpu = procs_per_gpu
        self.jobs_per_gpu_hour = jobs_per_gpu_hour
        self.mean_job_s = mean_job_s
        self.interactive_share = interactive_share
        self.saturate = saturate
        self.gpu_mem_bytes = gpu_mem_gib * GIB
        self.gpu_tdp_w = gpu_tdp_w
        self.gpu_name = gpu_name
        rows = shipped_profiles(SYNTHETIC) if profiles is None else profiles
        self._families = [_Family.of(name, rows) for name in family_shares]
        self._shares = list(family_shares.values())
        self._rng = random.Random(seed)
        self._uuids = [f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{host}/{i}')}" for i in range(gpus)]
        weights = [1.0 / (k + 1) for k in range(len(self.tenants))]
        total = sum(weights)
        self._tenant_w = [w / total for w in weights]
        self._peak_h = [(10.0 + 5.0 * k) % 24.0 for k in range(len(self.tenants))]
        self._jobs: list[_Job] = []
        self._next_arrival: list[float] = []
        self._last: float | None = None
        self._job_seq = 0
        self._pid_seq = 1000 + self._rng.randrange(50_000)

    # lifecycle (nothing to open: kept for the GpuBackend contract)
    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def read(self) -> Reading:
        """Advance the workload to ``clock.now()`` and read every GPU and process."""
        return self.read_at(self.clock.now())

    def read_at(self, now: float) -> Reading:
        """Synchronous :meth:`read` at time ``now`` (for simulators and benchmarks)."""
        self._advance(now)
        return self._sample(now)

    def jobs(self) -> list[SyntheticJob]:
        """The jobs running at the last read, oldest first.

        >>> b = SyntheticBackend(tenants=["vc-a"], gpus=4, seed=0)
        >>> r = b.read_at(1.7e9)
        >>> sorted({p.job for p in r.procs}) == sorted(j.job for j in b.jobs())
        True
        """
        return [
            SyntheticJob(
                job=j.job_id,
                tenant=j.tenant,
                gpus=len(j.procs),
                model=j.profile.family,
                batch_size=j.profile.batch_size,
                amp=j.profile.amp,
                start=j.start,
                end=j.end,
            )
            for j in self._jobs
        ]

    # workload evolution
    def rhythm(self, tenant_index: int, t: float) -> float:
        """Arrival-rate factor of a tenant at time ``t``: daily cosine, 0.6 at weekends."""
        hour = (t % _DAY_S) / 3600.0
        daily = 1.0 + 0.6 * math.cos(2.0 * math.pi * (hour - self._peak_h[tenant_index]) / 24.0)
        weekday = int(t // _DAY_S + 3) % 7  # 1970-01-01 was a Thursday (3 = Mon-based)
        return daily * (0.6 if weekday >= 5 else 1.0)

    def _max_rate(self, k: int) -> float:
        return self.jobs_per_gpu_hour * self.gpus / 3600.0 * self._tenant_w[k] * 1.6

    def _advance(self, now: float) -> None:
        if self._last is None:
            # warm start: replay the arrivals of the last few mean job durations
            self._last = now - 3.0 * self.mean_job_s
            self._next_arrival = [
                self._last + self._rng.expovariate(self._max_rate(k))
                for k in range(len(self.tenants))
            ]
        if now <= self._last:
            return
        start = max(self._last, now - 3.0 * self.mean_job_s)
        events: list[tuple[float, int]] = []
        for k in range(len(self.tenants)):
            t = max(self._next_arrival[k], start)
            while t <= now:
                if self._rng.random() * 1.6 <= self.rhythm(k, t):  # thinning
                    events.append((t, k))
                t += self._rng.expovariate(self._max_rate(k))
            self._next_arrival[k] = t
        events.sort()
        for t, k in events:
            self._finish_until(t)
            self._start_job(t, k)
        self._finish_until(now)
        if self.saturate:
            self._fill(now)
        self._last = now

    def _finish_until(self, t: float) -> None:
        if any(j.end <= t for j in self._jobs):
            self._jobs = [j for j in self._jobs if j.end > t]

    def _load(self) -> tuple[list[int], list[float]]:
        count = [0] * self.gpus
        mem = [0.0] * self.gpus
        for j in self._jobs:
            for p in j.procs:
                count[p.gpu] += 1
                mem[p.gpu] += j.mem_bytes + _CONTEXT_BYTES
        return count, mem

    def _start_job(self, t: float, k: int, width: int | None = None) -> bool:
        rng = self._rng
        family = rng.choices(self._families, weights=self._shares)[0]
        batch = rng.choice(family.batch_sizes)
        amp = rng.choice(family.amp)
        prof = family.rows[(batch, amp)]
        mem_bytes = prof.gpu_mem_mb * MIB
        if width is None:
            width = rng.choices(_WIDTHS, weights=_WIDTH_P)[0]
        width = min(width, self.gpus)
        count, mem = self._load()
        need = mem_bytes + _CONTEXT_BYTES
        free = [
            g
            for g in sorted(range(self.gpus), key=lambda g: (count[g], g))
            if count[g] < self.procs_per_gpu and mem[g] + need <= self.gpu_mem_bytes
        ]
        if len(free) < width:
            return False  # does not fit on this host: it runs (or waits) elsewhere
        self._job_seq += 1
        duration = self.mean_job_s * math.exp(rng.gauss(-0.5, 1.0))
        job = _Job(
            job_id=f"{self.tenants[k]}-{self.host}-{self._job_seq:05d}",
            tenant=self.tenants[k],
            profile=prof,
            mem_bytes=mem_bytes,
            start=t,
            end=t + max(60.0, duration),
            interactive=rng.random() < self.interactive_share,
            startup_s=rng.uniform(30.0, 300.0),
            pause_every_s=rng.uniform(900.0, 3600.0),
            pause_s=rng.uniform(60.0, 300.0),
        )
        for g in free[:width]:
            self._pid_seq += rng.randint(1, 40)
            job.procs.append(_Proc(pid=self._pid_seq, gpu=g))
        self._jobs.append(job)
        return True

    def _fill(self, now: float) -> None:
        for k in range(self.gpus * self.procs_per_gpu):
            if not self._start_job(now, k % len(self.tenants), width=1):
                break

    # sampling
    def _activity(self, job: _Job, now: float) -> tuple[float, float]:
        """(utilisation factor, memory factor) of a job at ``now`` (phase model)."""
        age = now - job.start
        if job.interactive:
            burst = (age % 1800.0) < 120.0  # a short burst every half hour
            return (0.6 if burst else 0.01), 0.5
        if age < job.startup_s:
            return 0.1, max(0.05, age / job.startup_s)
        if (age - job.startup_s) % job.pause_every_s > job.pause_every_s - job.pause_s:
            return 0.02, 1.0  # evaluation / checkpoint pause
        return 1.0, 1.0

    def _sample(self, now: float) -> Reading:
        rng = self._rng
        gauss = rng.gauss
        util = [0.0] * self.gpus
        mem_util = [0.0] * self.gpus
        mem = [0.0] * self.gpus
        procs: list[ProcReading] = []
        for job in self._jobs:
            act, mem_factor = self._activity(job, now)
            prof = job.profile
            steady_util, steady_mem_util = prof.gpu_util_pct, prof.mem_util_pct or 0.0
            for p in job.procs:
                p.noise = 0.7 * p.noise + gauss(0.0, 0.05)
                factor = act * (1.0 + p.noise)
                sm = min(100.0, max(0.0, steady_util * factor + gauss(0.0, 1.0)))
                mu = min(100.0, max(0.0, steady_mem_util * factor))
                used = job.mem_bytes * mem_factor + _CONTEXT_BYTES
                util[p.gpu] += sm
                mem_util[p.gpu] += mu
                mem[p.gpu] += used
                procs.append(
                    ProcReading(
                        pid=p.pid,
                        gpu=self._uuids[p.gpu],
                        sm_util=round(sm, 2),
                        mem_util=round(mu, 2),
                        mem_used=int(used),
                        tenant=job.tenant,
                        job=job.job_id,
                        model=prof.family,
                        batch_size=prof.batch_size,
                        amp=prof.amp,
                    )
                )
        gpus = []
        for i in range(self.gpus):
            u = min(100.0, util[i])
            gpus.append(
                GpuReading(
                    uuid=self._uuids[i],
                    index=i,
                    util=round(u, 2),
                    mem_util=round(min(100.0, mem_util[i]), 2),
                    mem_used=int(min(mem[i], self.gpu_mem_bytes)),
                    mem_total=int(self.gpu_mem_bytes),
                    power_w=round(0.15 * self.gpu_tdp_w + 0.85 * self.gpu_tdp_w * u / 100.0, 1),
                    sm_clock_mhz=1410.0 if u > 0.5 else 210.0,
                    name=self.gpu_name,
                )
            )
        return Reading(gpus=gpus, procs=procs)
