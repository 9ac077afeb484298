"""Per-host snapshot sequence tracking: drop duplicates, count gaps, detect resets.

Each collector numbers its snapshots with a per-host ``seq`` that never repeats and sends
them in order (its spool drains oldest first). So, per host: a ``seq`` at or below the
last one seen is a duplicate (an at-least-once redelivery) and is dropped; a jump of more
than one means snapshots were lost and the gap is counted. A collector whose state was
wiped starts again from 0: a low ``seq`` whose timestamp is more than ``reset_after_s``
newer than the last snapshot is taken as such a reset, not as a duplicate.

Example:
    >>> t = initial()
    >>> t, verdict, lost = observe(t, seq=0, ts=10.0)
    >>> t, verdict, lost = observe(t, seq=3, ts=13.0)
    >>> verdict, lost
    ('new', 2)
    >>> observe(t, seq=3, ts=13.0)[1:]
    ('duplicate', 0)
"""

from __future__ import annotations

from typing import Any, Literal

Verdict = Literal["new", "duplicate", "reset"]


def initial() -> dict[str, Any]:
    return {"seq": -1, "ts": 0.0, "lost": 0, "dups": 0, "resets": 0}


def observe(
    state: dict[str, Any], *, seq: int, ts: float, reset_after_s: float = 300.0
) -> tuple[dict[str, Any], Verdict, int]:
    """``(new_state, verdict, lost)``; ``lost`` = snapshots missing before this one."""
    last = state["seq"]
    if seq <= last:
        if last >= 0 and ts > state["ts"] + reset_after_s:
            new = {**state, "seq": seq, "ts": ts, "resets": state["resets"] + 1}
            return new, "reset", 0
        return {**state, "dups": state["dups"] + 1}, "duplicate", 0
    lost = seq - last - 1 if last >= 0 else 0
    new = {**state, "seq": seq, "ts": max(ts, state["ts"]), "lost": state["lost"] + lost}
    return new, "new", lost
