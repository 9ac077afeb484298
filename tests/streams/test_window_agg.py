"""Window aggregation: order-independent, idempotent per (host, seq), merge == fold."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dprobe.schema import JobEvent
from dprobe.streams.state import job_book, seq_tracker
from dprobe.streams.state.window_agg import (
    WindowSettings,
    add,
    initial,
    merge,
    result,
    split_snapshot,
)
from tests.streams.helpers import make_snapshots, reference_windows

CFG = WindowSettings(window_s=10.0)


def _parts(seed: int) -> list:
    snaps = make_snapshots(hosts=3, ticks=10, seed=seed)
    return [p for s in snaps for p in split_snapshot(s, CFG)]


def _fold(parts: list, tenant: str, start: float) -> dict:
    state = initial(tenant, start)
    for p in parts:
        if (p.tenant, p.window_start) == (tenant, start):
            state = add(state, p)
    return state


@given(seed=st.integers(0, 1000), shuffle=st.randoms())
@settings(max_examples=40, deadline=None)
def test_result_is_exactly_the_same_in_any_arrival_order_and_under_replays(seed, shuffle) -> None:
    parts = _parts(seed)
    tenant, start = parts[0].tenant, parts[0].window_start
    in_order = result(_fold(parts, tenant, start), CFG)
    mixed = parts + shuffle.sample(parts, len(parts) // 2)  # replays
    by_host: dict[str, list] = {}
    for p in mixed:
        by_host.setdefault(p.host, []).append(p)
    hosts = list(by_host)
    shuffle.shuffle(hosts)  # hosts interleave differently; each host stays in seq order
    interleaved = [p for h in hosts for p in by_host[h]]
    assert result(_fold(interleaved, tenant, start), CFG) == in_order


def test_matches_the_plain_python_reference() -> None:
    snaps = make_snapshots(hosts=3, ticks=30, seed=4)
    parts = [p for s in snaps for p in split_snapshot(s, CFG)]
    ref = reference_windows(snaps, 10.0)
    for (tenant, start), r in ref.items():
        w = result(_fold(parts, tenant, start), CFG)
        assert (w.samples, w.hosts) == (r["samples"], r["hosts"])
        assert abs(w.effective_demand_gpus - r["effective_demand_gpus"]) < 1e-9
        assert abs(w.gpus_busy - r["gpus_busy"]) < 1e-9


def test_merge_of_disjoint_hosts_equals_one_fold() -> None:
    parts = _parts(7)
    tenant, start = parts[0].tenant, parts[0].window_start
    mine = [p for p in parts if (p.tenant, p.window_start) == (tenant, start)]
    a = _fold([p for p in mine if p.host == "host-0"], tenant, start)
    b = _fold([p for p in mine if p.host != "host-0"], tenant, start)
    assert result(merge(a, b), CFG) == result(_fold(mine, tenant, start), CFG)


def test_seq_tracker_counts_gaps_drops_duplicates_and_sees_resets() -> None:
    t = seq_tracker.initial()
    verdicts = []
    records = [(0, 0.0), (1, 1.0), (1, 1.0), (4, 4.0), (2, 2.0), (0, 1000.0), (1, 1001.0)]
    for seq, ts in records:
        t, v, lost = seq_tracker.observe(t, seq=seq, ts=ts)
        verdicts.append((v, lost))
    assert verdicts == [
        ("new", 0),
        ("new", 0),
        ("duplicate", 0),
        ("new", 2),
        ("duplicate", 0),
        ("suspect", 0),
        ("reset", 1),
    ]


def test_a_seen_seq_with_a_newer_time_is_a_conflict_not_a_redelivery() -> None:
    """Two collectors under one host id: the second's low seqs come with current times.
    A redelivery never carries a time newer than the host's newest snapshot."""
    t = seq_tracker.initial()
    for seq in range(100):  # the first collector, one snapshot a second
        t, _, _ = seq_tracker.observe(t, seq=seq, ts=float(seq))
    verdicts = []
    for seq in range(5):  # the second starts at 0 while the first goes on
        t, v, lost = seq_tracker.observe(t, seq=seq, ts=100.0 + seq + 0.5)
        verdicts.append((v, lost))
        t, v, lost = seq_tracker.observe(t, seq=100 + seq, ts=100.0 + seq)
        verdicts.append((v, lost))
    assert verdicts == [("conflict", 0), ("new", 0)] * 5
    t, v, _ = seq_tracker.observe(t, seq=50, ts=50.0)  # a redelivery of the first's
    assert v == "duplicate"
    assert (t["conflicts"], t["dups"], t["lost"], t["resets"], t["seq"]) == (5, 1, 0, 0, 104)


def test_one_spoofed_low_seq_neither_resets_a_host_nor_fakes_losses() -> None:
    t = seq_tracker.initial()
    for seq in range(50):
        t, _, _ = seq_tracker.observe(t, seq=seq, ts=float(seq))
    t, verdict, _ = seq_tracker.observe(t, seq=0, ts=50.0 + 3600.0)  # spoof, an hour ahead
    assert verdict == "suspect"
    t, verdict, lost = seq_tracker.observe(t, seq=50, ts=50.0)  # the real host goes on
    assert (verdict, lost) == ("new", 0)
    # a second stray record after the real one confirms nothing: suspected again
    t, verdict, lost = seq_tracker.observe(t, seq=1, ts=3651.0)
    assert (verdict, lost) == ("suspect", 0)
    assert t["lost"] == 0 and t["resets"] == 0


def test_job_book_pending_and_running() -> None:
    rng = random.Random(3)
    book = job_book.initial()
    expect: dict[str, tuple[str, int]] = {}
    for i in range(200):
        job = f"j{rng.randrange(30)}"
        kind = rng.choice(["submit", "start", "finish", "cancel"])
        gpus = rng.choice([1, 2, 8])
        book = job_book.apply(
            book, JobEvent(ts=float(i), event=kind, job=job, tenant="t", gpus=gpus)
        )
        if kind in ("finish", "cancel"):
            expect[job] = ("done", 0)
        elif (status := expect.get(job, ("", 0))[0]) == "done" or (
            kind == "submit" and status == "running"
        ):
            pass
        else:
            expect[job] = ("pending" if kind == "submit" else "running", gpus)
    pending = sum(g for s, g in expect.values() if s == "pending")
    running = sum(g for s, g in expect.values() if s == "running")
    assert job_book.totals(book) == (float(pending), float(running))


def test_a_snapshot_covers_at_most_its_window() -> None:
    """A snapshot whose interval is longer than the window (a collector misconfigured, or a
    bad record within the schema's bounds) adds at most a window's worth of GPU time."""
    import msgspec

    (snap,) = make_snapshots(hosts=1, ticks=1, t0=1_700_000_000.0)
    cfg = WindowSettings(window_s=60.0)
    for interval, covered in ((1.0, 1.0), (60.0, 60.0), (1e7, 60.0)):
        parts = split_snapshot(msgspec.structs.replace(snap, interval_s=interval), cfg)
        for p in parts:
            gpus = {q.gpu for q in snap.procs if q.tenant == p.tenant}
            assert p.gpu_s == len(gpus) * covered
            assert p.instance_s == p.samples * covered
            w = result(add(initial(p.tenant, p.window_start), p), cfg)
            assert w.gpus_busy <= len(gpus)


def test_one_record_with_a_seq_far_ahead_neither_blocks_a_host_nor_fakes_losses() -> None:
    """A stray record whose seq runs far ahead of what the host could have taken since
    its newest snapshot (a corrupt or spoofed record) is only suspected: the host's next
    snapshots are taken (they were dropped as conflicts for ``reset_after_s``) and no
    snapshot counts as lost. A jump the host confirms (its next seq follows) is taken."""
    t = seq_tracker.initial()
    for seq in range(50):
        t, _, _ = seq_tracker.observe(t, seq=seq, ts=float(seq))
    t, verdict, lost = seq_tracker.observe(t, seq=2**40, ts=50.0)
    assert (verdict, lost) == ("suspect", 0)
    for seq in range(50, 60):  # the real host goes on, one a second
        t, verdict, lost = seq_tracker.observe(t, seq=seq, ts=float(seq))
        assert (verdict, lost) == ("new", 0)
    assert (t["seq"], t["lost"], t.get("conflicts", 0)) == (59, 0, 0)
    # a collector whose seq really jumped (a restored seq file) goes on from there
    t, verdict, _ = seq_tracker.observe(t, seq=1_000_000, ts=60.0)
    assert verdict == "suspect"
    t, verdict, lost = seq_tracker.observe(t, seq=1_000_001, ts=61.0)
    assert (verdict, lost) == ("new", 1_000_001 - 59 - 1)
    assert t["seq"] == 1_000_001


def test_a_gap_the_elapsed_time_explains_is_taken_at_once() -> None:
    """Snapshots lost while a host was away (its spool full): the first one after the gap
    is taken and the gap counted, however long, when the time since the newest snapshot
    could hold that many ticks of the fastest collector (``MIN_TICK_S`` apart)."""
    t = seq_tracker.initial()
    t, _, _ = seq_tracker.observe(t, seq=0, ts=0.0)
    gap = int(3600 / seq_tracker.MIN_TICK_S)  # an hour of the fastest ticks
    t, verdict, lost = seq_tracker.observe(t, seq=gap, ts=3600.0)
    assert (verdict, lost) == ("new", gap - 1)
    t, verdict, lost = seq_tracker.observe(t, seq=gap + 100, ts=3600.0)  # no time for 99 more
    assert (verdict, lost) == ("suspect", 0)
    t, verdict, lost = seq_tracker.observe(t, seq=gap + seq_tracker.CONFIRM_WITHIN, ts=3600.0)
    assert (verdict, lost) == ("new", seq_tracker.CONFIRM_WITHIN - 1)
