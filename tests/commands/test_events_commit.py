"""`dprobe events --group --plans` commits no further than the first event of a plan it
still holds, so a restart reads the plan again instead of losing it."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from dprobe.commands.events import _Tail
from dprobe.schema import encode
from dprobe.sinks.plan_order import PlanAssembler
from dprobe.sinks.seen_ids import SeenIds
from tests.sinks.test_plan_order import _event as _plain_event


def _event(*args, **kw):  # type: ignore[no-untyped-def]
    import msgspec

    return msgspec.structs.replace(_plain_event(*args, **kw), time="2025-11-30T05:20:00Z")


P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_offsets_stop_at_the_first_event_of_a_plan_still_held() -> None:
    tail = _Tail(json=True, max_events=None, plans=PlanAssembler())
    seen = SeenIds()
    assert tail.handle(P0, 10, encode(_event("a1", 1, "vc-a", 8, 16)), seen)
    assert tail.printed == 0
    assert tail.commit_offsets() == {P0: 10}  # a1 is held: read it again after a restart
    assert tail.handle(P1, 4, encode(_event("x", 2, "vc-c", 8, 16, size=2)), seen)
    assert tail.commit_offsets() == {P0: 10, P1: 4}
    assert tail.handle(P0, 11, encode(_event("a2", 1, "vc-b", 16, 8)), seen)
    assert tail.printed == 2  # plan 1 out; plan 2 still waits for its second event
    assert tail.commit_offsets() == {P0: 12, P1: 4}


def test_without_plans_everything_handled_is_committed() -> None:
    tail = _Tail(json=True, max_events=None)
    assert tail.handle(P0, 10, encode(_event("a1", 1, "vc-a", 8, 16)), SeenIds())
    assert tail.printed == 1 and tail.commit_offsets() == {P0: 11}


def test_a_tail_without_group_keeps_nothing_of_the_plans_it_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Memory follows the plans not printed yet, not every event ever read (a tail
    without --group never commits, so nothing else would let go of them)."""
    tail = _Tail(json=False, max_events=None, plans=PlanAssembler())
    seen = SeenIds()
    for seq in range(1, 51):
        tail.handle(P0, 2 * seq, encode(_event(f"a{seq}", seq, "vc-a", 8, 16)), seen)
        tail.handle(P0, 2 * seq + 1, encode(_event(f"b{seq}", seq, "vc-b", 16, 8)), seen)
    tail.handle(P0, 200, encode(_event("c", 60, "vc-c", 8, 16, size=2)), seen)
    assert tail.printed == 100
    assert len(capsys.readouterr().out.splitlines()) == 100
    assert set(tail.held) == tail.plans.pending_event_ids == {"c"}  # type: ignore[union-attr]


def test_max_events_stops_at_the_end_of_the_plan_that_reaches_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two plans released at once (the newer waited for the older): --max-events 2 prints
    the older, whole, and no more; the newer is not committed, so a group prints it next."""
    tail = _Tail(json=False, max_events=2, plans=PlanAssembler())
    seen = SeenIds()
    assert tail.handle(P0, 10, encode(_event("a1", 1, "vc-a", 8, 16)), seen)
    assert tail.handle(P1, 4, encode(_event("b1", 2, "vc-c", 8, 16)), seen)
    assert tail.handle(P1, 5, encode(_event("b2", 2, "vc-d", 16, 8)), seen)
    assert tail.printed == 0  # plan 2 is complete, but waits for plan 1
    assert not tail.handle(P0, 11, encode(_event("a2", 1, "vc-b", 16, 8)), seen)
    lines = capsys.readouterr().out.splitlines()
    assert tail.printed == 2 and [line.split()[1] for line in lines] == ["vc-a", "vc-b"]
    assert tail.commit_offsets() == {P0: 12, P1: 4}
