"""A tenant's jobs as the scheduler reports them: what waits and what runs, as plain state.

Only the scheduler knows what is pending, so a tenant's demand = what runs + what waits.
``submit`` puts a job in the queue, ``start`` makes it run, ``finish``/``cancel`` remove it.
Events may arrive out of order across restarts; a job never returns from removed to
queued by a stale ``submit`` (a removed job is remembered for ``forget_after_s``, until
:func:`prune` forgets it).

Jobs are stored under the fixed-size digest of their id
(:func:`~dprobe.streams.state.bounds.digest`), so one job's entries take a bounded number
of bytes (:data:`EVENT_BYTES` per event at most) whatever its id; the window stage splits
a tenant's book into shards by job (:func:`~dprobe.streams.state.bounds.shard_of`) and
reads them together with :func:`combined`.

Each job keeps its submit and start times and the level the job profiler predicts for it
(``level``, passed by the caller; ``None``: unknown), so the book can say what was queued
and running at any window's end (:func:`active_at`) and what happened inside a window
(:func:`events_in`), until :func:`prune` drops what every closed window has used. Duplicate
events (at-least-once delivery) change nothing and are not counted twice.

Stored form (plain JSON data)::

    {"jobs": {job digest: [status, gpus, ts, submit_ts, start_ts, level]},
     "done": {job digest: ts},
     "ended": [[end_ts, gpus, submit_ts, start_ts, level], ...],
     "log": [[ts, kind, gpus, run_s], ...]}

A book stored by an older worker (``jobs`` entries ``[status, gpus, ts]``, no ``ended`` or
``log``) still loads: its jobs count as submitted (and started, when running) at ``ts``,
with no predicted level (an entry is widened when its job's next event arrives); its
jobs, stored by id, move to their digest with their next event.

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
from dprobe.streams.state.bounds import digest

# Upper bounds of the stored bytes of each kind of entry (a number takes at most 24
# characters, a job is stored under its 16-character digest):
JOB_BYTES = 144  # "<digest>":["running",gpus,ts,submit_ts,start_ts,"L1"],
DONE_BYTES = 48  # "<digest>":ts,
ENDED_BYTES = 112  # [end_ts,gpus,submit_ts,start_ts,"L1"],
LOG_BYTES = 96  # [ts,"submit",gpus,run_s],
EVENT_BYTES = JOB_BYTES + 2 * LOG_BYTES + DONE_BYTES + ENDED_BYTES  # what one event can add


def bytes_bound(book: dict[str, Any]) -> int:
    """Upper bound of ``book``'s stored size, from what it holds (not how it was built)."""
    return (
        64
        + JOB_BYTES * len(book["jobs"])
        + DONE_BYTES * len(book["done"])
        + ENDED_BYTES * len(book.get("ended", ()))
        + LOG_BYTES * len(book.get("log", ()))
    )


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
    """Book after ``ev`` (returns a new dict; the input is not changed), forgetting
    removed jobs older than ``forget_after_s`` before ``ev``.

    ``level`` is the profiler's predicted level of the job (kept from its first event
    that carries one).
    """
    new: dict[str, Any] = {
        "jobs": dict(book["jobs"]),
        "done": dict(book["done"]),
        "ended": list(book.get("ended", [])),
        "log": list(book.get("log", [])),
    }
    apply_into(new, ev, level=level)
    horizon = ev.ts - forget_after_s
    new["done"] = {j: t for j, t in new["done"].items() if t >= horizon}
    return new


def apply_into(book: dict[str, Any], ev: JobEvent, *, level: Level | None = None) -> None:
    """Apply ``ev`` to ``book`` in place, in time independent of the book's size (entries
    are replaced, never changed in place; :func:`prune` forgets removed jobs)."""
    book.setdefault("ended", [])
    book.setdefault("log", [])
    jobs, done, ended, log = book["jobs"], book["done"], book["ended"], book["log"]
    key = digest(ev.job)
    if ev.job in jobs:  # stored by id before digests: move it
        jobs[key] = jobs.pop(ev.job)
    if ev.job in done:
        done[key] = done.pop(ev.job)
    current = _entry(jobs[key]) if key in jobs else None
    if ev.event in ("finish", "cancel"):
        if key not in done:
            run_s = None
            gpus = ev.gpus
            if current is not None:
                del jobs[key]
                _s, gpus, _t, submit_ts, start_ts, lvl = current
                ended.append([ev.ts, gpus, submit_ts, start_ts, lvl])
                run_s = ev.ts - start_ts if start_ts is not None else None
            log.append([ev.ts, "finish", gpus, run_s])
        done[key] = ev.ts
    elif key not in done:
        if current is None:
            start_ts = ev.ts if ev.event == "start" else None
            status = "running" if start_ts is not None else "pending"
            jobs[key] = [status, ev.gpus, ev.ts, ev.ts, start_ts, level]
            log.append([ev.ts, "submit", ev.gpus, None])
            if start_ts is not None:
                log.append([ev.ts, "start", ev.gpus, None])
        else:
            status, _g, ts, submit_ts, start_ts, lvl = current
            lvl = lvl if lvl is not None else level
            if ev.event == "submit":
                submit_ts = min(submit_ts, ev.ts)
                if status == "pending":
                    jobs[key] = ["pending", ev.gpus, ev.ts, submit_ts, None, lvl]
                else:
                    jobs[key] = [status, current[1], ts, submit_ts, start_ts, lvl]
            elif status == "pending":
                jobs[key] = ["running", ev.gpus, ev.ts, submit_ts, ev.ts, lvl]
                log.append([ev.ts, "start", ev.gpus, None])
            else:
                jobs[key] = ["running", ev.gpus, ev.ts, submit_ts, min(start_ts, ev.ts), lvl]


def combined(books: list[dict[str, Any]]) -> dict[str, Any]:
    """One read-only book holding the jobs of several shards of one tenant's book, for
    :func:`active_at`, :func:`events_in` and :func:`totals` (removed jobs left out)."""
    if len(books) == 1:
        return books[0]
    out: dict[str, Any] = initial()
    for b in books:
        out["jobs"].update(b["jobs"])
        out["ended"] += b.get("ended", [])
        out["log"] += b.get("log", [])
    out["ended"].sort(key=lambda e: e[0])
    out["log"].sort(key=lambda e: e[0])
    return out


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


def prune(book: dict[str, Any], before: float, forget_after_s: float = 86_400.0) -> dict[str, Any]:
    """The book without log entries and ended jobs older than ``before`` (every window
    ending at or before it is closed) and without removed jobs older than
    ``forget_after_s`` before it; the same dict when nothing is dropped."""
    ended = [e for e in book.get("ended", []) if e[0] >= before]
    log = [e for e in book.get("log", []) if e[0] >= before]
    horizon = before - forget_after_s
    done = {j: t for j, t in book["done"].items() if t >= horizon}
    if (
        len(ended) == len(book.get("ended", []))
        and len(log) == len(book.get("log", []))
        and len(done) == len(book["done"])
    ):
        return book
    return {**book, "done": done, "ended": ended, "log": log}


def forget_oldest(book: dict[str, Any], share: float = 0.5) -> int:
    """Forget the oldest ``share`` of the removed jobs remembered (in place), to make room
    when the book reaches its byte budget; returns how many were forgotten. A stale
    event of a forgotten job may then count it again."""
    done = book["done"]
    n = int(len(done) * share) if done else 0
    for job, _ts in sorted(done.items(), key=lambda kv: kv[1])[:n]:
        del done[job]
    return n
