"""The rule by which the planning topic's tail gives a group's window length: the newest
window, or a worker's start mark; a mark less than START_GRACE_S from the newest mark that
held (no window between), with another length, loses (its worker started the group at
the same moment as that one's). Read forwards, as the worker reads it."""

from __future__ import annotations

from dprobe.streams.codec import WorkerStarted
from dprobe.streams.group_window import START_GRACE_S, _Lengths


def _read(*items: tuple[float, float] | float) -> _Lengths:
    """``(window_s, at)``: a mark; a bare number: a window of that length; offsets count
    from 0."""
    lengths = _Lengths()
    for offset, item in enumerate(items):
        if isinstance(item, tuple):
            lengths.mark(offset, WorkerStarted(window_s=item[0], at=item[1]))
        else:
            lengths.window(item)
    return lengths


def test_of_workers_starting_together_the_first_length_holds() -> None:
    got = _read(10.0, (30.0, 100.0), (10.0, 101.0), (30.0, 102.0), (10.0, 103.0))
    assert got.newest == 30.0
    assert sorted(got.lost) == [2, 4]
    assert all(m.window_s == 30.0 for m in got.lost.values())  # lost to the 30-s mark


def test_a_mark_later_than_the_grace_changes_the_length() -> None:
    got = _read((10.0, 0.0), (20.0, START_GRACE_S + 10))
    assert (got.newest, got.lost) == (20.0, {})


def test_a_window_ends_a_start() -> None:
    got = _read((30.0, 100.0), 30.0, (10.0, 101.0))  # a 30-s window, then a new start
    assert (got.newest, got.lost) == (10.0, {})


def test_a_mark_is_judged_against_the_newest_that_held_not_an_older_one() -> None:
    # X (10 s) started, later Y (20 s) held; Z's clock says it marked between them: it is
    # judged against Y, the length the group runs with now
    same = _read((10.0, 0.0), (20.0, 70.0), (20.0, 55.0))
    assert (same.newest, same.lost) == (20.0, {})
    other = _read((10.0, 0.0), (20.0, 70.0), (10.0, 55.0))
    assert other.newest == 20.0 and other.lost[2].window_s == 20.0


def test_a_clock_ahead_does_not_block_later_starts_for_long() -> None:
    # the first writer's clock was 10 minutes fast and it died before closing a window; a
    # start 5 minutes later with a right clock is more than the grace apart: it holds
    got = _read((10.0, 600.0), (20.0, 300.0))
    assert (got.newest, got.lost) == (20.0, {})


def test_a_joined_mark_says_nothing_of_the_length_but_is_the_newest_mark() -> None:
    lengths = _read(30.0, (30.0, 100.0))
    joined = WorkerStarted(10.0, 101.0, shape={"grace_s": 5.0}, joined=True, worker="h:/b")
    lengths.mark(2, joined)
    assert (lengths.newest, lengths.lost) == (30.0, {})
    assert lengths.newest_of_another("h:/a") is joined
    # a start with another length a moment later loses to the 30-s start, not to it
    lengths.mark(3, WorkerStarted(window_s=20.0, at=102.0, worker="h:/c"))
    assert lengths.lost[3].window_s == 30.0 and lengths.newest_of_another("h:/a") is joined


def test_a_worker_is_compared_with_another_workers_newest_mark() -> None:
    lengths = _read((30.0, 100.0))
    (first,) = lengths.marks
    b = WorkerStarted(30.0, 110.0, shape={"grace_s": 5.0}, joined=True, worker="h:/b")
    lengths.mark(1, b)
    assert lengths.newest_of_another("h:/b") is first  # b's own mark is skipped
    assert lengths.newest_of_another("h:/c") is b
    lengths.mark(2, WorkerStarted(10.0, 111.0, shape={"grace_s": 9.0}, worker="h:/d"))
    assert 2 in lengths.lost and lengths.newest_of_another("h:/c") is b  # lost: never
