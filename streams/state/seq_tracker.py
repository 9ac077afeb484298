"""Per-host snapshot sequence tracking: drop duplicates, count gaps, detect resets.

Each collector numbers its snapshots with a per-host ``seq`` that never repeats and sends
them in order (its spool drains oldest first). So, per host: a ``seq`` at or below the
last one seen is a duplicate (an at-least-once redelivery) and is dropped; a jump of more
than one means snapshots were lost and the gap is counted. A collector whose state was
wiped starts again from 0: a low ``seq`` whose timestamp is more than ``reset_after_s``
newer than the last snapshot is *suspected* to be such a reset (dropped, remembered), and
the reset is believed only when the host's next snapshot continues from it (a ``seq`` at
most ``CONFIRM_WITHIN`` above it, not older); the suspected snapshot then counts as lost.
A ``seq`` further ahead than the host could have counted since its newest snapshot (more
than ``CONFIRM_WITHIN`` plus one per ``MIN_TICK_S`` of event time between them) is
suspected the same way: taken only when the next snapshot continues from it. So one
spoofed or corrupt record can neither restart a host's sequence, nor push it so far ahead
that the host's real snapshots are dropped, nor fake lost snapshots.

A redelivery carries the time it was first sent with, never newer than the host's newest
snapshot. A ``seq`` already seen with a *newer* time (within ``reset_after_s``) is no
redelivery: it is a ``conflict``, a second collector sending under the same host id, or
one restarted with a fresh state within ``reset_after_s``. It is dropped like a duplicate,
and counted apart so that it can be told (the worker logs and exports it by host).

A reset also moves the host's ``base``, so that :func:`effective_seq` (``seq + base``,
the number the window stage dedupes a host's partials by) keeps rising across it: a
window that holds snapshots from before and after a restart takes both.

Example:
    >>> t = initial()
    >>> t, verdict, lost = observe(t, seq=0, ts=10.0)
    >>> t, verdict, lost = observe(t, seq=3, ts=13.0)
    >>> verdict, lost
    ('new', 2)
    >>> observe(t, seq=3, ts=13.0)[1:]
    ('duplicate', 0)
    >>> observe(t, seq=2, ts=14.0)[1:]  # seen, but newer: another sender
    ('conflict', 0)
    >>> t, verdict, _ = observe(t, seq=0, ts=900.0)  # a wiped collector, or a spoof
    >>> verdict
    'suspect'
    >>> t, verdict, lost = observe(t, seq=1, ts=901.0)  # it goes on: a reset
    >>> verdict, lost, effective_seq(t, 1)  # its first snapshot lost; seq 1 comes after 3
    ('reset', 1, 5)
"""

from __future__ import annotations

from typing import Any, Literal, TypeGuard

Verdict = Literal["new", "duplicate", "conflict", "suspect", "reset"]
CONFIRM_WITHIN = 10  # a reset is believed when the next seq is at most this far above
MAX_SEQ = 2**63 - 1  # effective seqs stay within a signed 64-bit integer
# the shortest time between two snapshots of a host that a gap may stand for: a tenth of
# the collector's shortest interval_s (0.01 s), so that no real gap is ever suspected
MIN_TICK_S = 0.001


def initial() -> dict[str, Any]:
    return {"seq": -1, "ts": 0.0, "lost": 0, "dups": 0, "resets": 0}


def observe(
    state: dict[str, Any], *, seq: int, ts: float, reset_after_s: float = 300.0
) -> tuple[dict[str, Any], Verdict, int]:
    """``(new_state, verdict, lost)``; ``lost`` = snapshots missing before this one."""
    last = state["seq"]
    cand = state.get("cand")
    if seq <= last:
        if _continues(cand, seq, ts):
            lost = seq - cand[0]  # the suspected snapshot and any gap after it
            new = {**state, "seq": seq, "ts": ts, "resets": state["resets"] + 1, "cand": None}
            new["lost"] = state["lost"] + lost
            # the suspected snapshot's effective seq follows the last one before the reset
            new["base"] = min(effective_seq(state, last) + 1 - cand[0], MAX_SEQ - seq)
            return new, "reset", lost
        if last >= 0 and ts > state["ts"] + reset_after_s:
            return {**state, "cand": [seq, ts]}, "suspect", 0
        if ts > state["ts"]:  # a redelivery is never newer than the newest snapshot
            return {**state, "conflicts": state.get("conflicts", 0) + 1}, "conflict", 0
        return {**state, "dups": state["dups"] + 1}, "duplicate", 0
    lost = seq - last - 1 if last >= 0 else 0
    if last >= 0 and not _continues(cand, seq, ts) and lost >= _explained_gap(state["ts"], ts):
        return {**state, "cand": [seq, ts]}, "suspect", 0
    new = {**state, "seq": seq, "ts": max(ts, state["ts"]), "lost": state["lost"] + lost}
    new["cand"] = None
    return new, "new", lost


def _continues(cand: list[Any] | None, seq: int, ts: float) -> TypeGuard[list[Any]]:
    """Whether a snapshot ``(seq, ts)`` continues from the suspected one ``cand`` (``[seq,
    ts]``, or ``None``): at most ``CONFIRM_WITHIN`` above it, and not older."""
    return cand is not None and cand[0] < seq <= cand[0] + CONFIRM_WITHIN and ts >= cand[1]


def _explained_gap(newest_ts: float, ts: float) -> int:
    """The most snapshots a host could have lost between its newest one (``newest_ts``) and
    one taken at ``ts``: ``CONFIRM_WITHIN``, plus one per ``MIN_TICK_S`` in between."""
    return CONFIRM_WITHIN + int(max(0.0, ts - newest_ts) / MIN_TICK_S)


def effective_seq(state: dict[str, Any], seq: int) -> int:
    """``seq`` of the host whose tracking state is ``state``, counted on across its resets."""
    return min(seq + state.get("base", 0), MAX_SEQ)
