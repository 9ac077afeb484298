"""A tenant's jobs as the scheduler reports them: what waits and what runs, as plain state.

Only the scheduler knows what is pending, so a tenant's demand = what runs + what waits.
``submit`` puts a job in the queue, ``start`` makes it run, ``finish``/``cancel`` remove it.
Events may arrive out of order across restarts; a job never returns from removed to
queued by a stale ``submit`` (a removed job is remembered by id for ``forget_after_s``).

Example:
    >>> from dprobe.schema import JobEvent
    >>> book = initial()
    >>> book = apply(book, JobEvent(ts=1, event="submit", job="j1", tenant="vc-a", gpus=8))
    >>> book = apply(book, JobEvent(ts=2, event="submit", job="j2", tenant="vc-a", gpus=4))
    >>> book = apply(book, JobEvent(ts=3, event="start", job="j1", tenant="vc-a", gpus=8))
    >>> totals(book)
    (4.0, 8.0)
"""

from __future__ import annotations

from typing import Any

from dprobe.schema import JobEvent

_STATUS = {"submit": "pending", "start": "running"}


def initial() -> dict[str, Any]:
    """Empty book: ``{"jobs": {job: [status, gpus, ts]}, "done": {job: ts}}``."""
    return {"jobs": {}, "done": {}}


def apply(book: dict[str, Any], ev: JobEvent, forget_after_s: float = 86_400.0) -> dict[str, Any]:
    """Book after ``ev`` (returns a new dict; the input is not changed)."""
    jobs = dict(book["jobs"])
    done = dict(book["done"])
    if ev.event in ("finish", "cancel"):
        jobs.pop(ev.job, None)
        done[ev.job] = ev.ts
    elif ev.job not in done:
        current = jobs.get(ev.job)
        status = _STATUS[ev.event]
        if not (current and current[0] == "running" and status == "pending"):
            jobs[ev.job] = [status, ev.gpus, ev.ts]
    horizon = ev.ts - forget_after_s
    done = {j: t for j, t in done.items() if t >= horizon}
    return {"jobs": jobs, "done": done}


def totals(book: dict[str, Any]) -> tuple[float, float]:
    """``(pending_gpus, running_gpus)`` of the book."""
    pending = sum(g for s, g, _ in book["jobs"].values() if s == "pending")
    running = sum(g for s, g, _ in book["jobs"].values() if s == "running")
    return float(pending), float(running)
