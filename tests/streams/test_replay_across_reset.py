"""A worker restarted from its last commit replays the snapshots of a host from before
the host's sequence restarted (its collector's state wiped) as well as after: the replay
adds nothing twice, and the host's next snapshots are taken, as in an uninterrupted run."""

from __future__ import annotations

from typing import Any

from dprobe import schema
from dprobe.streams import codec
from tests.streams.test_batch_semantics import (
    UPDATE_PARTITIONS,
    FakeTable,
    FakeTopic,
    _event,
    _ingest,
)


def _snap(seq: int, ts: float) -> schema.HostSnapshot:
    gpu = schema.Gpu(
        uuid="g0", index=0, util=50.0, mem_util=10.0, mem_used=1, mem_total=10, power_w=1.0
    )
    proc = schema.Proc(
        pid=1, gpu="g0", tenant="vc-a", job="j", sm_util=50.0, mem_util=10.0, mem_used=1
    )
    return schema.HostSnapshot(
        host="h1", ts=ts, interval_s=1.0, seq=seq, gpus=(gpu,), procs=(proc,)
    )


# seqs 0-3, the collector is wiped and starts again from 0, 1000 s later
SNAPS = [_snap(s, 100.0 + s) for s in range(4)] + [_snap(s, 1100.0 + s) for s in range(4)]
EVENTS = [_event("samples", 0, i, schema.encode(s), s.host.encode()) for i, s in enumerate(SNAPS)]


def _taken(updates: FakeTopic) -> list[tuple[float, int]]:
    """(snapshot time, dedupe seq) of every partial sent."""
    out = []
    for _, _, value in updates.sent:
        update = codec.decode_update(value)
        if isinstance(update, list):
            out += [(p.ts, p.seq) for p in update]
    return out


async def _run(batches: list[list[Any]], hosts: FakeTable) -> list[tuple[float, int]]:
    updates = FakeTopic(UPDATE_PARTITIONS)
    ingest = _ingest(updates, hosts)
    for batch in batches:
        await ingest.on_snapshots(batch)
    return _taken(updates)


async def test_a_replay_across_a_hosts_sequence_restart_changes_nothing() -> None:
    uninterrupted = await _run([EVENTS], FakeTable())

    hosts = FakeTable()
    before_crash = await _run([EVENTS[:6]], hosts)  # the reset confirmed and written
    # the last commit was before seq 2 of the old sequence: that is where the replay starts
    after = await _run([EVENTS[2:6], EVENTS[6:]], FakeTable.recovered(hosts.changelog))
    assert sorted(set(before_crash + after)) == sorted(uninterrupted)
    # what was taken before the crash is not taken again under another dedupe seq
    assert len(before_crash + after) == len(set(before_crash + after)), after
