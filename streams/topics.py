"""Names of every topic the worker reads and writes, derived from settings in one place.

Example:
    >>> from dprobe.config import WorkerSettings
    >>> t = TopicNames.from_settings(WorkerSettings())
    >>> t.samples, t.updates
    ('dprobe.samples', 'dprobe-worker-tenant-updates')
"""

from __future__ import annotations

from dataclasses import dataclass

from dprobe.config import WorkerSettings


@dataclass(frozen=True)
class TopicNames:
    samples: str
    jobs: str
    features: str
    scaling_events: str
    deadletter: str
    cluster: str  # what the scheduler reports: capacity and quotas (one partition)
    updates: str  # internal: per-tenant partials and job updates, keyed by tenant
    planning: str  # internal, one partition: every TenantWindow, for the single planner

    @classmethod
    def from_settings(cls, s: WorkerSettings) -> TopicNames:
        k = s.kafka
        return cls(
            samples=k.topic("samples"),
            jobs=k.topic("jobs"),
            features=k.topic("features"),
            scaling_events=k.topic("scaling-events"),
            deadletter=k.topic("deadletter"),
            cluster=k.topic("cluster"),
            updates=f"{s.app_id}-tenant-updates",
            planning=f"{s.app_id}-planning",
        )

    def external(self) -> tuple[str, ...]:
        return (
            self.samples,
            self.jobs,
            self.features,
            self.scaling_events,
            self.deadletter,
            self.cluster,
        )
