"""The simulator's job: trace fields plus mutable run state (plain slots, no logic).

Example:
    >>> j = SimJob(0, "vc_a", gpus=2, submit_s=0.0, duration_s=60.0, model="vgg16")
    >>> j.remaining_s, j.state
    (60.0, 'waiting')
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dprobe.sim.cluster import Node
    from dprobe.traces.jobs_csv import JobRecord


class SimJob:
    """One job. ``remaining_s`` is work left in seconds at full (exclusive) speed."""

    __slots__ = (
        "attained_gpu_s",
        "away_mark",
        "duration_s",
        "end_s",
        "gpus",
        "guarantee_wait_s",
        "idx",
        "key",
        "last_s",
        "model",
        "name",
        "placement",
        "pred_s",
        "queue",
        "remaining_s",
        "resume_remaining_s",
        "shared_with",
        "speed",
        "start_s",
        "state",
        "submit_s",
        "tenant",
        "version",
        "waited_s",
    )

    def __init__(
        self,
        idx: int,
        tenant: str,
        *,
        gpus: int,
        submit_s: float,
        duration_s: float,
        model: str = "",
        name: str = "",
    ) -> None:
        self.idx = idx
        self.name = name or str(idx)
        self.tenant = tenant
        self.gpus = gpus
        self.submit_s = submit_s
        self.duration_s = duration_s
        self.model = model
        self.remaining_s = duration_s
        self.attained_gpu_s = 0.0
        self.start_s: float | None = None
        self.end_s: float | None = None
        self.last_s = submit_s
        self.speed = 1.0
        self.state = "waiting"  # waiting | running | done
        self.placement: list[tuple[Node, int]] = []
        self.shared_with: SimJob | None = None
        self.version = 0
        self.queue = 0
        self.pred_s = 0.0
        self.key: tuple[float, ...] = ()
        self.waited_s = 0.0  # all time spent waiting: before the first start, after preemptions
        self.guarantee_wait_s = 0.0  # the part of it while its VC's own nodes were away
        self.away_mark = 0.0  # its VC's away clock when it last began to wait
        self.resume_remaining_s = duration_s  # work left when it last (re)started

    def __repr__(self) -> str:
        return f"SimJob({self.name}, {self.tenant}, {self.gpus} GPU, {self.state})"


def from_records(records: Iterable[JobRecord], max_job_gpus: int) -> tuple[list[SimJob], int]:
    """Jobs to simulate, sorted by submit time, and how many were left out.

    Left out: jobs asking for 0 GPUs (CPU jobs; the Chronus simulator drops them too) and
    jobs larger than ``max_job_gpus`` (they could never be placed).
    """
    jobs: list[SimJob] = []
    skipped = 0
    for r in sorted(records, key=lambda r: r.submit_s):
        if r.num_gpu <= 0 or r.num_gpu > max_job_gpus:
            skipped += 1
            continue
        jobs.append(
            SimJob(
                len(jobs),
                r.tenant,
                gpus=r.num_gpu,
                submit_s=r.submit_s,
                duration_s=r.duration_s,
                model=r.model_name,
                name=r.job_id,
            )
        )
    return jobs, skipped
