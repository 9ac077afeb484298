"""The five scheduling policies, each a priority key (lower runs first) per VC queue.

- ``fifo``: submit time; non-preemptive.
- ``sjf``: true duration (oracle); non-preemptive.
- ``srtf``: true remaining time; preemptive (a waiting job stops running ones that have
  more time left, when that makes room).
- ``qssf``: Helios' quasi-shortest-service-first: predicted duration x GPUs, the
  prediction the mean duration of the last ``qssf_history`` finished jobs of the same
  tenant and model (else the tenant, else all tenants, else ``qssf_default_s``);
  non-preemptive (Hu et al., SC'21).
- ``las``: Tiresias-style two-queue least-attained-service (Gu et al., NSDI'19): a job is
  in queue 0 until it has had ``las_threshold_gpu_s`` GPU-seconds, then in queue 1;
  queue 0 preempts queue 1; FIFO inside a queue.

Ties break by submit time, then trace order. Waiting jobs keep their key while they
wait (none of these keys changes for a job that is not running).

Example:
    >>> p = make_policy("sjf")
    >>> from dprobe.sim.jobs import SimJob
    >>> a = SimJob(0, "t", gpus=1, submit_s=0.0, duration_s=50.0)
    >>> b = SimJob(1, "t", gpus=1, submit_s=5.0, duration_s=10.0)
    >>> sorted([a, b], key=lambda j: p.key(j, 5.0))[0].name
    '1'
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

from dprobe.sim.jobs import SimJob

POLICIES = ("fifo", "sjf", "srtf", "qssf", "las")


@dataclass(frozen=True)
class PolicySettings:
    """Settings of the policies (assumptions where the papers leave room)."""

    las_threshold_gpu_s: float = 3600.0
    qssf_history: int = 10
    qssf_default_s: float = 3600.0


class Policy:
    """Base: FIFO. ``key(job, now)`` ranks a job; lower first."""

    name = "fifo"
    preemptive = False

    def __init__(self, settings: PolicySettings | None = None) -> None:
        self.settings = settings or PolicySettings()

    def key(self, job: SimJob, now: float) -> tuple[float, ...]:
        return (job.submit_s, job.idx)

    def on_submit(self, job: SimJob) -> None:
        """Called once when the job arrives."""

    def on_finish(self, job: SimJob) -> None:
        """Called once when the job completes."""

    def demote_after_s(self, job: SimJob) -> float | None:
        """Seconds of running after which the job's key worsens (LAS), else ``None``."""
        return None


class Sjf(Policy):
    name = "sjf"

    def key(self, job: SimJob, now: float) -> tuple[float, ...]:
        return (job.duration_s, job.submit_s, job.idx)


class Srtf(Policy):
    name = "srtf"
    preemptive = True

    def key(self, job: SimJob, now: float) -> tuple[float, ...]:
        left = job.remaining_s
        if job.state == "running":
            left -= (now - job.last_s) * job.speed
        return (max(left, 0.0), job.submit_s, job.idx)


class Qssf(Policy):
    name = "qssf"

    def __init__(self, settings: PolicySettings | None = None) -> None:
        super().__init__(settings)
        n = self.settings.qssf_history
        self._by_model: dict[tuple[str, str], deque[float]] = defaultdict(lambda: deque(maxlen=n))
        self._by_tenant: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=n))
        self._all: deque[float] = deque(maxlen=n)

    def predict(self, job: SimJob) -> float:
        for hist in (
            self._by_model.get((job.tenant, job.model)),
            self._by_tenant.get(job.tenant),
            self._all,
        ):
            if hist:
                return sum(hist) / len(hist)
        return self.settings.qssf_default_s

    def on_submit(self, job: SimJob) -> None:
        job.pred_s = self.predict(job)

    def on_finish(self, job: SimJob) -> None:
        self._by_model[(job.tenant, job.model)].append(job.duration_s)
        self._by_tenant[job.tenant].append(job.duration_s)
        self._all.append(job.duration_s)

    def key(self, job: SimJob, now: float) -> tuple[float, ...]:
        return (job.pred_s * job.gpus, job.submit_s, job.idx)


class Las(Policy):
    name = "las"
    preemptive = True

    def key(self, job: SimJob, now: float) -> tuple[float, ...]:
        return (float(job.queue), job.submit_s, job.idx)

    def demote_after_s(self, job: SimJob) -> float | None:
        if job.queue > 0:
            return None
        return max(0.0, (self.settings.las_threshold_gpu_s - job.attained_gpu_s) / job.gpus)


_CLASSES: dict[str, type[Policy]] = {
    "fifo": Policy,
    "sjf": Sjf,
    "srtf": Srtf,
    "qssf": Qssf,
    "las": Las,
}


def make_policy(name: str, settings: PolicySettings | None = None) -> Policy:
    """A fresh policy object (QSSF keeps history, so one per run)."""
    try:
        return _CLASSES[name](settings)
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
