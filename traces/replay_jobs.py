"""A job trace (``jobs-csv``) as scheduler events plus the telemetry of running jobs.

A job trace says when each job was submitted and how long it ran, not when it was
scheduled. Assumption (no scheduler known): every job **starts when it is submitted**
(an unbounded cluster, no queueing) and finishes ``duration`` later. So each job gives
three JobEvents: ``submit`` and ``start`` at its submit time (in that order) and
``finish`` at submit + duration; its ``model_name`` goes in ``model``. To see queueing
under a finite cluster, use ``dprobe simulate`` on the same trace.

The worker builds windows from telemetry, so the running GPUs of each tenant are also
sent as synthetic hosts, exactly as a demand series is
(:mod:`dprobe.traces.replay_demand`, running = the GPUs of the tenant's running jobs,
no pending job of its own).

Example:
    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> jobs = [JobRecord("7", "vc_a", 8, 120.0, 60.0, "vgg16", 2)]
    >>> [(e.ts, e.event) for e in job_events(jobs)]
    [(120.0, 'submit'), (120.0, 'start'), (180.0, 'finish')]
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Iterator

from dprobe.schema import JobEvent
from dprobe.traces.demand_series import DemandPoint
from dprobe.traces.jobs_csv import JobRecord
from dprobe.traces.replay_demand import DemandLayout, demand_records
from dprobe.traces.replay_record import ReplayRecord

_RANK = {"finish": 0, "submit": 1, "start": 2}


def job_events(jobs: Iterable[JobRecord]) -> list[JobEvent]:
    """Submit/start/finish events of ``jobs``, sorted by time (finishes first on ties)."""
    keyed = []
    for n, j in enumerate(jobs):
        common = {
            "job": j.job_id,
            "tenant": j.tenant,
            "gpus": j.num_gpu,
            "model": j.model_name or None,
        }
        for kind, ts in (
            ("submit", j.submit_s),
            ("start", j.submit_s),
            ("finish", j.submit_s + j.duration_s),
        ):
            keyed.append(((ts, _RANK[kind], n), JobEvent(ts=ts, event=kind, **common)))  # type: ignore[arg-type]
    keyed.sort(key=lambda kv: kv[0])
    return [ev for _, ev in keyed]


def running_points(events: Iterable[JobEvent]) -> Iterator[DemandPoint]:
    """Running GPUs of each tenant after every change (one point per tenant and instant)."""
    running: dict[str, int] = defaultdict(int)
    batch: dict[str, None] = {}
    now = None
    for ev in events:
        if now is not None and ev.ts != now:
            yield from (DemandPoint(now, t, running[t], 0.0) for t in batch)
            batch = {}
        now = ev.ts
        if ev.event == "start":
            running[ev.tenant] += ev.gpus
        elif ev.event == "finish":
            running[ev.tenant] -= ev.gpus
        batch[ev.tenant] = None
    if now is not None:
        yield from (DemandPoint(now, t, running[t], 0.0) for t in batch)


def jobs_records(
    jobs: Iterable[JobRecord], layout: DemandLayout | None = None
) -> Iterator[ReplayRecord]:
    """JobEvents and running telemetry of ``jobs``, merged in event-time order."""
    lay = layout or DemandLayout()
    telemetry = DemandLayout(lay.tick_s, lay.gpus_per_host, lay.mem_total, pending_events=False)
    events = job_events(jobs)
    return heapq.merge(
        (ReplayRecord.of(ev) for ev in events),
        demand_records(running_points(events), telemetry),
        key=lambda r: r.ts,
    )
