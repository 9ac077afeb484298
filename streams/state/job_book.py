"""A tenant's jobs as the scheduler reports them: what waits and what runs, as plain state.

Only the scheduler knows what is pending, so a tenant's demand = what runs + what waits.
``submit`` puts a job in the queue, ``start`` makes it run, ``finish``/``cancel`` remove it.
Events may arrive out of order across restarts; a job never returns from removed to
queued by a stale ``submit`` (a removed job is remembered by id for ``forget_after_s``).

Each job keeps its submit and start times and the level the job profiler predicts for it
(``level``, passed by the caller; ``None``: unknown), so the book can say what was queued
and running at any window's end (:func:`active_at`) and what happened inside a window
(:func:`events_in`), until :func:`prune` drops what every closed window has used. Duplicate
events (at-least-once delivery) change nothing and are not counted twice.

Stored form (plain JSON data)::

    {"jobs": {job: [status, gpus, ts, submit_ts, start_ts, level]},
     "done": {job: ts},
     "ended": [[end_ts, gpus, submit_ts, start_ts, level], ...],
     "log": [[ts, kind, gpus, run_s], ...]}

A book stored by an older worker (``jobs`` entries ``[status, gpus, ts]``, no ``ended`` or
``log``) still loads: its jobs count as submitted (and started, when running) at ``ts``,
with no predicted level (an entry is widened when its job's next event arrives).

Example:
    >>> from dprobe.schema import JobEvent
    >>> book = initial()
    >>> book = apply(book, JobEvent(ts=1, event="submit", job="j1", tenant="vc-a", gpus=8))
    >>> book = apply(book, JobEvent(ts=2, event="submit", job="j2", tenant="vc-a", gpus=4),
    ...              level="L1")
    >>> book = apply(book, JobEvent(ts=3, event="start", job="j1", tenant="vc-a", gpus=8))
    >>> totals(book)
    (4.0, 8.0)
    >>> [(j.gpus, j.start_ts, j.level) for j in active_at(book, 2.5)]
    [(8, None, None), (4, None, 'L1')]
    >>> [(e.kind, e.gpus) for e in events_in(book, 0.0, 3.0)]
    [('submit', 8), ('submit', 4)]
"""

from __future__ import annotations

from typing import Any

from dprobe.models.job_flow import ActiveJob, FlowEvent
from dprobe.models.levels import Level
from dprobe.schema import JobEvent


def initial() -> dict[str, Any]:
    """Empty book (see the module doc for its stored form)."""
    return {"jobs": {}, "done": {}, "ended": [], "log": []}


def _entry(raw: list[Any]) -> list[Any]:
    """A job entry in the current form (an old ``[status, gpus, ts]`` is widened)."""
    if len(raw) >= 6:
        return list(raw)
    status, gpus, ts = raw[:3]
    return [status, gpus, ts, ts, ts if status == "running" else None, None]


def apply(
    book: dict[str, Any],
    ev: JobEvent,
    forget_after_s: float = 86_400.0,
    *,
    level: Level | None = None,
) -> dict[str, Any]:
    """Book after ``ev`` (returns a new dict; the input is not changed).

    ``level`` is the profiler's predicted level of the job (kept from its first event
    that carries one).
    """
    jobs = dict(book["jobs"])  # entries are replaced, never changed in place
    done = dict(book["done"])
    ended = list(book.get("ended", []))
    log = list(book.get("log", []))
    current = _entry(jobs[ev.job]) if ev.job in jobs else None
    if ev.event in ("finish", "cancel"):
        if ev.job not in done:
            run_s = None
            gpus = ev.gpus
            if current is not None:
                del jobs[ev.job]
                _s, gpus, _t, submit_ts, start_ts, lvl = current
                ended.append([ev.ts, gpus, submit_ts, start_ts, lvl])
                run_s = ev.ts - start_ts if start_ts is not None else None
            log.append([ev.ts, "finish", gpus, run_s])
        done[ev.job] = ev.ts
    elif ev.job not in done:
        if current is None:
            start_ts = ev.ts if ev.event == "start" else None
            status = "running" if start_ts is not None else "pending"
            jobs[ev.job] = [status, ev.gpus, ev.ts, ev.ts, start_ts, level]
            log.append([ev.ts, "submit", ev.gpus, None])
            if start_ts is not None:
                log.append([ev.ts, "start", ev.gpus, None])
        else:
            status, _g, ts, submit_ts, start_ts, lvl = current
            lvl = lvl if lvl is not None else level
            if ev.event == "submit":
                submit_ts = min(submit_ts, ev.ts)
                if status == "pending":
                    jobs[ev.job] = ["pending", ev.gpus, ev.ts, submit_ts, None, lvl]
                else:
                    jobs[ev.job] = [status, current[1], ts, submit_ts, start_ts, lvl]
            elif status == "pending":
                jobs[ev.job] = ["running", ev.gpus, ev.ts, submit_ts, ev.ts, lvl]
                log.append([ev.ts, "start", ev.gpus, None])
            else:
                jobs[ev.job] = ["running", ev.gpus, ev.ts, submit_ts, min(start_ts, ev.ts), lvl]
    horizon = ev.ts - forget_after_s
    done = {j: t for j, t in done.items() if t >= horizon}
    return {"jobs": jobs, "done": done, "ended": ended, "log": log}


def totals(book: dict[str, Any]) -> tuple[float, float]:
    """``(pending_gpus, running_gpus)`` of the book now (after every event applied)."""
    entries = book["jobs"].values()
    pending = sum(e[1] for e in entries if e[0] == "pending")
    running = sum(e[1] for e in entries if e[0] == "running")
    return float(pending), float(running)


def active_at(book: dict[str, Any], end: float) -> list[ActiveJob]:
    """Jobs queued or running just before ``end`` (events at ``end`` or later not seen).

    Only as exact as the book: a job that ended before ``end`` and was pruned is gone,
    and a job's state is taken from the events applied so far.
    """
    out = []
    for raw in book["jobs"].values():
        _s, gpus, _t, submit_ts, start_ts, level = _entry(raw)
        if submit_ts < end:
            started = start_ts if start_ts is not None and start_ts < end else None
            out.append(ActiveJob(gpus, submit_ts, started, level))
    for end_ts, gpus, submit_ts, start_ts, level in book.get("ended", []):
        if submit_ts < end <= end_ts:
            started = start_ts if start_ts is not None and start_ts < end else None
            out.append(ActiveJob(gpus, submit_ts, started, level))
    return out


def events_in(book: dict[str, Any], start: float, end: float) -> list[FlowEvent]:
    """Submits, starts and finishes (or cancels) with ``start <= ts < end``."""
    return [
        FlowEvent(kind, gpus, run_s)
        for ts, kind, gpus, run_s in book.get("log", [])
        if start <= ts < end
    ]


def has_jobs_at(book: dict[str, Any], start: float, end: float) -> bool:
    """Whether the window ``[start, end)`` has anything to say about this book."""
    return bool(active_at(book, end) or events_in(book, start, end))


def prune(book: dict[str, Any], before: float) -> dict[str, Any]:
    """The book without log entries and ended jobs older than ``before`` (every window
    ending at or before it is closed); the same dict when nothing is dropped."""
    ended = [e for e in book.get("ended", []) if e[0] >= before]
    log = [e for e in book.get("log", []) if e[0] >= before]
    if len(ended) == len(book.get("ended", [])) and len(log) == len(book.get("log", [])):
        return book
    return {**book, "ended": ended, "log": log}
