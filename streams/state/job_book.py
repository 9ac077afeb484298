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

The window stage keeps a book as :class:`TenantJobs`: one small table value per job
(:meth:`TenantJobs.stored`), so an event rewrites one job's value whatever the number of
the tenant's jobs, and an index in memory (rebuilt from those values after a restart or
a rebalance) answers :meth:`~TenantJobs.active_at` and :meth:`~TenantJobs.events_in`
without decoding anything. The functions below work on the whole-book form, which older
workers stored in one value per shard and which a :class:`TenantJobs` still loads.

Whole-book form (plain JSON data)::

    {"jobs": {job digest: [status, gpus, ts, submit_ts, start_ts, level]},
     "done": {job digest: ts},
     "ended": [[end_ts, gpus, submit_ts, start_ts, level], ...],
     "log": [[ts, kind, gpus, run_s], ...]}

A book stored by an older worker (``jobs`` entries ``[status, gpus, ts]``, no ``ended`` or
``log``) still loads: its jobs count as submitted (and started, when running) at ``ts``,
with no predicted level (an entry is widened when its job's next event arrives); its
jobs, stored by id, move to their digest with their next event.

One job's form (:meth:`TenantJobs.stored`; absent keys are empty)::

    {"o": order, "j": [status, gpus, ts, submit_ts, start_ts, level],
     "d": removed_ts, "e": [[end_ts, gpus, submit_ts, start_ts, level], ...],
     "l": [[ts, kind, gpus, run_s], ...]}

``j`` is the job while queued or running, ``d`` when it was removed (remembered for
``forget_after_s``), ``e`` and ``l`` its share of the book's ``ended`` and ``log`` until
:meth:`TenantJobs.prune` drops them; ``o`` (a counter of the tenant's book) keeps the
order in which the whole-book form listed its jobs, so sums come out the same.

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

import heapq
import math
from collections.abc import Iterable, Mapping
from typing import Any

from dprobe.models.job_flow import ActiveJob, FlowEvent
from dprobe.models.levels import Level
from dprobe.schema import JobEvent
from dprobe.streams.state.bounds import RANK_BYTES, digest

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
        + RANK_BYTES
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


# -- one table value per job ---------------------------------------------------------------
# Upper bounds of the stored bytes of one job's value (numbers at most 24 characters, the
# order counter at most 16): its braces and "o", then each kind of entry it holds.
ENTRY_BASE_BYTES = 48 + RANK_BYTES  # {"o":order} and the brackets of "e" and "l"
ENTRY_JOB_BYTES = 128  # ,"j":["running",gpus,ts,submit_ts,start_ts,"L1"]
ENTRY_DONE_BYTES = 32  # ,"d":ts
FORGET_AFTER_S = 86_400.0  # a removed job is remembered this long (see prune)


def entry_bytes_bound(entry: Mapping[str, Any]) -> int:
    """Upper bound of one job's stored value (:meth:`TenantJobs.stored`)."""
    return (
        ENTRY_BASE_BYTES
        + ENTRY_JOB_BYTES * ("j" in entry)
        + ENTRY_DONE_BYTES * ("d" in entry)
        + ENDED_BYTES * len(entry.get("e", ()))
        + LOG_BYTES * len(entry.get("l", ()))
    )


def _book_bytes(entry: Mapping[str, Any]) -> int:
    """What ``entry`` adds to the :func:`bytes_bound` of its shard of the whole book."""
    return (
        JOB_BYTES * ("j" in entry)
        + DONE_BYTES * ("d" in entry)
        + ENDED_BYTES * len(entry.get("e", ()))
        + LOG_BYTES * len(entry.get("l", ()))
    )


def _drop_before(entry: dict[str, Any], before: float) -> int:
    """Drop ``entry``'s ended jobs and log entries older than ``before`` (in place);
    returns the :func:`bytes_bound` they took."""
    dropped = 0
    for key, size in (("e", ENDED_BYTES), ("l", LOG_BYTES)):
        rows = entry.get(key)
        if rows:
            kept = [x for x in rows if x[0] >= before]
            dropped += size * (len(rows) - len(kept))
            if kept:
                entry[key] = kept
            else:
                del entry[key]
    return dropped


def _is_digest(key: str) -> bool:
    return len(key) == 16 and all(c in "0123456789abcdef" for c in key)


class TenantJobs:
    """One tenant's job book, one value per job, with an index in memory.

    It answers as the whole book of :func:`apply_into` would (same jobs, same order), and
    applies an event in time independent of the number of jobs: the event changes one
    job's value (:meth:`apply` returns its digest; :meth:`stored` is what to write).
    ``shards`` is the number of shards the byte budget is kept for, as the whole book
    was split (:meth:`make_room`); a value never passes that budget either.

    Example:
        >>> tj = TenantJobs(shards=4)
        >>> d = tj.apply(JobEvent(ts=1.0, event="submit", job="j1", tenant="t", gpus=8))
        >>> tj.stored(d)
        {'o': 0, 'j': ['pending', 8, 1.0, 1.0, None, None], 'l': [[1.0, 'submit', 8, None]]}
        >>> tj.apply(JobEvent(ts=1.0, event="submit", job="j1", tenant="t", gpus=8)) is None
        True
        >>> [(j.gpus, j.start_ts) for j in tj.active_at(5.0)]
        [(8, None)]
        >>> again = TenantJobs.from_stored(4, {d: tj.stored(d)})[0]  # after a restart
        >>> again.active_at(5.0) == tj.active_at(5.0)
        True
    """

    def __init__(self, shards: int = 1, forget_after_s: float = FORGET_AFTER_S) -> None:
        self.shards = max(1, shards)
        self.forget_after_s = forget_after_s
        self.entries: dict[str, dict[str, Any]] = {}  # job digest -> its stored value
        # per shard, in the order the whole book listed them: queued/running jobs, and the
        # removed jobs remembered (digest -> removal time)
        self._active: list[dict[str, list[Any]]] = [{} for _ in range(self.shards)]
        self._done: list[dict[str, float]] = [{} for _ in range(self.shards)]
        self._size = [bytes_bound(initial())] * self.shards  # bytes_bound of each shard
        self._ended: set[str] = set()  # jobs with "e"
        self._logged: set[str] = set()  # jobs with "l"
        self._legacy: dict[int, dict[str, Any]] = {}  # whole-book shards left by older workers
        self._seq = 0
        # what prune has to look at, earliest first (stale items are skipped)
        self._due: dict[str, float] = {}  # job -> earliest "e"/"l" time
        self._due_heap: list[tuple[float, str]] = []
        self._done_heap: list[tuple[float, str]] = []

    # -- loading --------------------------------------------------------------------------
    @classmethod
    def from_stored(
        cls,
        shards: int,
        entries: Mapping[str, Mapping[str, Any]],
        legacy: Mapping[int, Mapping[str, Any]] | None = None,
        forget_after_s: float = FORGET_AFTER_S,
        *,
        pruned_before: float = -math.inf,
    ) -> tuple[TenantJobs, list[str], list[int]]:
        """The book stored as one value per job (``entries``: digest -> value) and, from
        older workers, whole-book shards (``legacy``: shard -> book).

        ``pruned_before``: the last :meth:`prune` was at this time (what a stored value
        still holds from before it is dropped again). Returns the book, the jobs whose
        values to write (:meth:`stored`: moved out of ``legacy``, or nothing left) and the
        ``legacy`` shards that changed (:meth:`legacy_stored`: what is left of each,
        ``None`` once nothing). A job stored both ways is taken from its own value (it
        was moved before and may have changed since).
        """
        tj = cls(shards, forget_after_s)
        moved: dict[str, None] = {}
        horizon = pruned_before - forget_after_s
        for d, raw in sorted(entries.items(), key=lambda kv: kv[1].get("o", 0)):
            e: dict[str, Any] = dict(raw)
            for field in ("j", "e", "l"):
                if field in e:
                    e[field] = [list(x) for x in e[field]] if field != "j" else list(e[field])
            _drop_before(e, pruned_before)
            if "d" in e and e["d"] < horizon:
                del e["d"]
            tj._seq = max(tj._seq, int(e.get("o", 0)) + 1)
            if e.keys() - {"o"}:
                tj._insert(d, e)
            else:
                moved[d] = None  # nothing left: delete it
        own = set(entries)
        changed: list[int] = []
        for k, book in sorted((legacy or {}).items()):
            for key, raw in book.get("jobs", {}).items():
                d = key if _is_digest(key) else digest(key)
                if d not in own:  # a job's own value was written after it moved: it wins
                    tj._insert(d, {**tj.entries.get(d, {}), "o": tj._next(), "j": _entry(raw)})
                    moved[d] = None
            for key, ts in book.get("done", {}).items():
                d = key if _is_digest(key) else digest(key)
                if d not in own:
                    tj._insert(d, {"o": tj._next(), **tj.entries.get(d, {}), "d": ts})
                    moved[d] = None
            rest = {
                "jobs": {},
                "done": {},
                "ended": [list(x) for x in book.get("ended", [])],
                "log": [list(x) for x in book.get("log", [])],
            }
            if rest["ended"] or rest["log"]:
                tj._legacy[k] = rest
                tj._size[k] += bytes_bound(rest) - bytes_bound(initial())
            if book.get("jobs") or book.get("done") or not (rest["ended"] or rest["log"]):
                changed.append(k)  # moved out of it (or left empty): rewrite or delete it
        return tj, sorted(moved), changed

    def _next(self) -> int:
        self._seq += 1
        return self._seq - 1

    def _insert(self, d: str, e: dict[str, Any]) -> None:
        """Put ``e`` (a job's value, new or just loaded) into the index."""
        if d in self.entries:
            self._remove(d)
        k = self.shard(d)
        self.entries[d] = e
        if "j" in e:
            self._active[k][d] = e["j"]
        if "d" in e:
            self._done[k][d] = e["d"]
            heapq.heappush(self._done_heap, (e["d"], d))
        self._size[k] += _book_bytes(e)
        self._index_times(d, e)

    def _remove(self, d: str) -> None:
        e = self.entries.pop(d)
        k = self.shard(d)
        self._active[k].pop(d, None)
        self._done[k].pop(d, None)
        self._size[k] -= _book_bytes(e)
        self._ended.discard(d)
        self._logged.discard(d)
        self._due.pop(d, None)

    def _index_times(self, d: str, e: Mapping[str, Any]) -> None:
        """Note ``e``'s ended jobs and log entries (for reading and for prune)."""
        ended, log = e.get("e"), e.get("l")
        due = math.inf
        if ended:
            self._ended.add(d)
            due = min(x[0] for x in ended)
        else:
            self._ended.discard(d)
        if log:
            self._logged.add(d)
            due = min(due, *(x[0] for x in log))
        else:
            self._logged.discard(d)
        if due == math.inf:
            self._due.pop(d, None)
        elif self._due.get(d) != due:
            self._due[d] = due
            heapq.heappush(self._due_heap, (due, d))

    def shard(self, d: str) -> int:
        """The budget shard of the job with digest ``d`` (the
        :func:`~dprobe.streams.state.bounds.shard_of` of its id)."""
        return int(d, 16) % self.shards if self.shards > 1 else 0

    # -- writing --------------------------------------------------------------------------
    def stored(self, d: str) -> dict[str, Any] | None:
        """The value to store for job ``d`` (``None``: nothing left, delete it)."""
        return self.entries.get(d)

    def legacy_stored(self, k: int) -> dict[str, Any] | None:
        """What is left of whole-book shard ``k`` of an older worker (``None``: nothing)."""
        return self._legacy.get(k)

    def make_room(self, job: str, limit: int) -> tuple[list[str], bool]:
        """Before an event of ``job``: when its shard could pass ``limit`` bytes, forget its
        oldest half of the removed jobs remembered (as :func:`forget_oldest`). Returns the
        jobs changed (to write) and whether the event fits."""
        d = digest(job)
        k = self.shard(d)
        forgotten: list[str] = []
        if self._size[k] + EVENT_BYTES > limit:
            done = self._done[k]
            n = int(len(done) * 0.5) if done else 0
            for old, _ts in sorted(done.items(), key=lambda kv: kv[1])[:n]:
                e = self.entries[old]
                del done[old]
                del e["d"]
                self._size[k] -= DONE_BYTES
                if not e.keys() - {"o"}:
                    self._remove(old)
                forgotten.append(old)
        fits = self._size[k] + EVENT_BYTES <= limit
        mine = self.entries.get(d)
        if mine is not None and entry_bytes_bound(mine) + EVENT_BYTES > limit:
            fits = False
        return forgotten, fits

    def apply(self, ev: JobEvent, *, level: Level | None = None) -> str | None:
        """Apply ``ev`` as :func:`apply_into` would; returns the digest of the job whose
        value changed (``None``: nothing changed, e.g. a duplicate)."""
        d = digest(ev.job)
        k = self.shard(d)
        e = self.entries.get(d)
        before = _book_bytes(e) if e is not None else 0
        current = e.get("j") if e is not None else None
        if ev.event in ("finish", "cancel"):
            if e is not None and "d" in e:
                if e["d"] == ev.ts:
                    return None
                e["d"] = ev.ts  # the whole book kept its place: so does the index
                self._done[k][d] = ev.ts
                heapq.heappush(self._done_heap, (ev.ts, d))
                return d
            if e is None:
                e = self.entries[d] = {"o": 0}
            run_s = None
            gpus = ev.gpus
            if current is not None:
                del e["j"]
                del self._active[k][d]
                _s, gpus, _t, submit_ts, start_ts, lvl = current
                e.setdefault("e", []).append([ev.ts, gpus, submit_ts, start_ts, lvl])
                run_s = ev.ts - start_ts if start_ts is not None else None
            e.setdefault("l", []).append([ev.ts, "finish", gpus, run_s])
            e["o"] = self._next()
            e["d"] = ev.ts
            self._done[k][d] = ev.ts
            heapq.heappush(self._done_heap, (ev.ts, d))
        elif e is not None and "d" in e:
            return None
        elif current is None:
            if e is None:
                e = self.entries[d] = {"o": 0}
            start_ts = ev.ts if ev.event == "start" else None
            status = "running" if start_ts is not None else "pending"
            e["o"] = self._next()
            e["j"] = self._active[k][d] = [status, ev.gpus, ev.ts, ev.ts, start_ts, level]
            log = e.setdefault("l", [])
            log.append([ev.ts, "submit", ev.gpus, None])
            if start_ts is not None:
                log.append([ev.ts, "start", ev.gpus, None])
        else:
            assert e is not None
            status, _g, ts, submit_ts, start_ts, lvl = current
            lvl = lvl if lvl is not None else level
            if ev.event == "submit":
                submit_ts = min(submit_ts, ev.ts)
                if status == "pending":
                    new = ["pending", ev.gpus, ev.ts, submit_ts, None, lvl]
                else:
                    new = [status, current[1], ts, submit_ts, start_ts, lvl]
            elif status == "pending":
                new = ["running", ev.gpus, ev.ts, submit_ts, ev.ts, lvl]
                e.setdefault("l", []).append([ev.ts, "start", ev.gpus, None])
            else:
                new = ["running", ev.gpus, ev.ts, submit_ts, min(start_ts, ev.ts), lvl]
            if new == current:  # the same job again (a pending job's start always differs)
                return None
            e["j"] = self._active[k][d] = new
        self._size[k] += _book_bytes(e) - before
        self._index_times(d, e)
        return d

    def prune(self, before: float) -> tuple[list[str], list[int]]:
        """Drop what :func:`prune` would drop at ``before`` (every window ending at or
        before it is closed); returns the jobs and the older workers' shards whose stored
        values change. Ended jobs and log entries go from memory only: a job's stored
        value keeps them until its next write, and :meth:`from_stored` drops them again
        (``pruned_before``), so closing a window rewrites nothing for them."""
        changed: dict[str, None] = {}
        while self._due_heap and self._due_heap[0][0] < before:
            due, d = heapq.heappop(self._due_heap)
            if self._due.get(d) != due:
                continue  # stale: the job changed since
            e = self.entries[d]
            self._size[self.shard(d)] -= _drop_before(e, before)
            self._index_times(d, e)
            if not e.keys() - {"o"}:
                changed[d] = None  # nothing left: delete it
        horizon = before - self.forget_after_s
        while self._done_heap and self._done_heap[0][0] < horizon:
            ts, d = heapq.heappop(self._done_heap)
            held = self.entries.get(d)
            if held is None or held.get("d") != ts:
                continue  # stale: forgotten or removed again since
            del held["d"]
            del self._done[self.shard(d)][d]
            self._size[self.shard(d)] -= DONE_BYTES
            changed[d] = None
        for d in changed:
            if not self.entries[d].keys() - {"o"}:
                self._remove(d)
        legacy = []
        for k, book in list(self._legacy.items()):
            pruned = prune(book, before, self.forget_after_s)
            if pruned is book:
                continue
            self._size[k] -= bytes_bound(book) - bytes_bound(pruned)
            legacy.append(k)
            if pruned["ended"] or pruned["log"]:
                self._legacy[k] = pruned
            else:
                del self._legacy[k]
        return list(changed), legacy

    # -- reading --------------------------------------------------------------------------
    def _ended_in_order(self) -> Iterable[list[Any]]:
        """Ended jobs in the order of :func:`combined`'s ``ended``."""
        rows = []
        for d in self._ended:
            e = self.entries[d]
            k = self.shard(d)
            rows += [(x[0], k, e["o"], i, x) for i, x in enumerate(e["e"])]
        for k, book in self._legacy.items():
            rows += [(x[0], k, -1, i, x) for i, x in enumerate(book["ended"])]
        # several shards were read together sorted by end; one shard as it was appended
        rows.sort(key=(lambda r: r[:4]) if self.shards > 1 else (lambda r: r[2:4]))
        return (r[4] for r in rows)

    def active_at(self, end: float) -> list[ActiveJob]:
        """Jobs queued or running just before ``end`` (as :func:`active_at`)."""
        out = []
        for shard in self._active:
            for _s, gpus, _t, submit_ts, start_ts, level in shard.values():
                if submit_ts < end:
                    started = start_ts if start_ts is not None and start_ts < end else None
                    out.append(ActiveJob(gpus, submit_ts, started, level))
        for end_ts, gpus, submit_ts, start_ts, level in self._ended_in_order():
            if submit_ts < end <= end_ts:
                started = start_ts if start_ts is not None and start_ts < end else None
                out.append(ActiveJob(gpus, submit_ts, started, level))
        return out

    def _log(self) -> list[list[Any]]:
        rows = [x for d in self._logged for x in self.entries[d]["l"]]
        rows += [x for book in self._legacy.values() for x in book["log"]]
        rows.sort(key=lambda x: x[0])
        return rows

    def events_in(self, start: float, end: float) -> list[FlowEvent]:
        """Submits, starts and finishes (or cancels) with ``start <= ts < end``."""
        return [FlowEvent(kind, gpus, run_s) for ts, kind, gpus, run_s in self._log()
                if start <= ts < end]  # fmt: skip

    def first_ts(self) -> float | None:
        """The earliest event time the book still has something to say about (a job's
        submit or a logged event), or ``None`` when it is empty."""
        times = [j[3] for shard in self._active for j in shard.values()]
        times += [x[2] for x in self._ended_in_order()]
        times += [x[0] for x in self._log()]
        return min(times, default=None)

    def spans(self) -> tuple[float | None, list[tuple[float, float]], list[float]]:
        """What :meth:`has_jobs_at` looks at: the earliest submit of a queued or running
        job (it speaks of every window ending after it), ``(submit, end)`` of each ended
        job (windows ending after its submit, at or before its end), and the time of
        each logged event (its window)."""
        active = min((j[3] for shard in self._active for j in shard.values()), default=None)
        ended = [(x[2], x[0]) for x in self._ended_in_order()]
        return active, ended, [x[0] for x in self._log()]

    def has_jobs_at(self, start: float, end: float) -> bool:
        """Whether the window ``[start, end)`` has anything to say about this book."""
        for shard in self._active:
            if any(j[3] < end for j in shard.values()):
                return True
        if any(x[2] < end <= x[0] for x in self._ended_in_order()):
            return True
        return any(start <= x[0] < end for x in self._log())

    def whole(self) -> dict[str, Any]:
        """The book in the whole-book form (one dict, as :func:`combined` reads it)."""
        return {
            "jobs": {d: list(j) for shard in self._active for d, j in shard.items()},
            "done": {d: ts for shard in self._done for d, ts in shard.items()},
            "ended": [list(x) for x in self._ended_in_order()],
            "log": [list(x) for x in self._log()],
        }

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def empty(self) -> bool:
        """Nothing left, in memory or stored: no job, no remembered removal, no older
        worker's shard (a new event starts the book afresh)."""
        return not self.entries and not self._legacy
