"""The disk spool: order, durability across reopen, torn tails, bound, drops."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dprobe.clock import ManualClock
from dprobe.collectors.assemble import build_collector
from dprobe.collectors.seq import SeqCounter
from dprobe.collectors.spool import Spool
from dprobe.collectors.synthetic import SyntheticBackend
from dprobe.config import CollectorSettings
from dprobe.errors import UsageError


def payload(seq: int, size: int = 100) -> bytes:
    body = f'{{"seq":{seq}}}'.encode()
    return body + b" " * max(0, size - len(body))


def drain(spool: Spool, batch: int = 7) -> list[int]:
    out: list[int] = []
    while records := spool.read(max_records=batch):
        out += [r.seq for r in records]
        assert all(r.payload == payload(r.seq, len(r.payload)) for r in records)
        spool.ack(records[-1].end, len(records))
    return out


def test_records_come_back_in_order_across_segments(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1000, fsync=False)
    spool.open()
    for i in range(50):
        spool.append(i, payload(i))
    assert len(list(tmp_path.glob("*.spool"))) > 3
    assert drain(spool) == list(range(50))
    assert spool.pending_records == 0 and spool.pending_bytes == 0
    assert len(list(tmp_path.glob("*.spool"))) == 1  # delivered segments are deleted


def test_unacked_records_survive_a_reopen_and_come_first(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1000)
    spool.open()
    for i in range(20):
        spool.append(i, payload(i))
    first = spool.read(max_records=5)
    spool.ack(first[-1].end, 5)
    spool.read(max_records=5)  # read but never acked: must be sent again
    spool.close()

    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1000)
    again.open()
    assert (again.pending_records, again.last_seq) == (15, 19)
    again.append(20, payload(20))
    assert drain(again) == list(range(5, 21))


def test_a_torn_tail_from_a_crash_is_cut_and_counted(tmp_path: Path) -> None:
    cut: list[int] = []
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.open()
    for i in range(3):
        spool.append(i, payload(i))
    spool.close()
    (segment,) = tmp_path.glob("*.spool")
    with segment.open("ab") as f:  # a crash in the middle of writing record 3
        f.write(b"\x00\x00\x00\x64\x12\x34")
    again = Spool(tmp_path, max_bytes=1 << 20, on_corrupt=cut.append)
    again.open()
    assert cut == [6]
    again.append(3, payload(3))
    assert drain(again) == [0, 1, 2, 3]


def test_a_corrupt_record_is_cut_not_sent(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.open()
    for i in range(4):
        spool.append(i, payload(i))
    (segment,) = tmp_path.glob("*.spool")
    data = bytearray(segment.read_bytes())
    data[2 * 116 + 20] ^= 0xFF  # flip a byte in record 2's payload
    segment.write_bytes(bytes(data))
    assert drain(spool) == [0, 1]


def test_when_full_the_oldest_are_dropped_and_counted(tmp_path: Path) -> None:
    dropped: list[int] = []
    spool = Spool(tmp_path, max_bytes=4000, segment_bytes=1000, fsync=False, on_drop=dropped.append)
    spool.open()
    for i in range(100):
        spool.append(i, payload(i))
    assert spool.total_bytes <= 4000
    delivered = drain(spool)
    # what is left is the newest, contiguous run; every missing one was counted
    assert delivered == list(range(100 - len(delivered), 100))
    assert sum(dropped) == spool.dropped == 100 - len(delivered)


def test_ack_of_a_position_already_dropped_is_ignored(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=2500, segment_bytes=1000, fsync=False)
    spool.open()
    for i in range(5):
        spool.append(i, payload(i))
    in_flight = spool.read(max_records=3)
    for i in range(5, 40):
        spool.append(i, payload(i))
    spool.ack(in_flight[-1].end, 3)  # its segment was dropped meanwhile
    remaining = drain(spool)
    assert remaining == sorted(remaining) and remaining[-1] == 39
    assert spool.pending_records == 0


def test_append_reaches_the_file_before_return(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.open()
    spool.append(0, payload(0))
    (segment,) = tmp_path.glob("*.spool")
    assert segment.stat().st_size == 16 + 100  # header + payload, without close()
    spool.close()


def test_two_collectors_cannot_share_a_spool(tmp_path: Path) -> None:
    first = Spool(tmp_path)
    first.open()
    with pytest.raises(UsageError, match="in use"):
        Spool(tmp_path).open()
    first.close()
    second = Spool(tmp_path)
    second.open()  # free again once the first one closed (or died)
    second.close()


def test_append_on_a_closed_spool_fails_loudly(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with pytest.raises(RuntimeError):
        spool.append(0, b"x")


def test_seq_never_repeats_across_restarts_and_respects_the_floor(tmp_path: Path) -> None:
    path = tmp_path / "seq-h1"
    c = SeqCounter(path, fsync=False)
    c.load()
    assert [c.next() for _ in range(3)] == [0, 1, 2]
    c2 = SeqCounter(path)
    c2.load()
    assert c2.next() == 3
    os.remove(path)  # state lost: the spool's last seq is the floor
    c3 = SeqCounter(path)
    c3.load(floor=4)
    assert c3.next() == 4
    c4 = SeqCounter(path)
    c4.load(floor=0)
    assert c4.next() == 5


async def test_a_full_spool_drops_the_oldest_and_the_collector_counts_them(tmp_path: Path) -> None:
    settings = CollectorSettings(
        host_id="h1",
        interval_s=1.0,
        spool_dir=tmp_path / "spool",
        state_dir=tmp_path / "state",
        spool_max_bytes=1 << 20,
        spool_fsync=False,
    )
    registry = CollectorRegistry()
    clock = ManualClock()
    backend = SyntheticBackend(gpus=8, procs_per_gpu=8, saturate=True, clock=clock)
    c = build_collector(
        settings, registry=registry, clock=clock, backend=backend, send=False, max_ticks=150
    )
    async with c:  # Kafka never seen: ~150 x 14.5 KiB does not fit in 1 MiB
        await c.wait()
    dropped = registry.get_sample_value(
        "dprobe_collector_dropped_snapshots_total", {"reason": "spool_full"}
    )
    c.spool.open()
    kept = [r.seq for r in c.spool.read(max_records=1000, max_bytes=1 << 30)]
    c.spool.close()
    assert c.spool.total_bytes <= 1 << 20
    assert dropped and dropped == 150 - len(kept)
    assert kept == list(range(150 - len(kept), 150))  # the newest survive, contiguous


def test_segments_removed_by_hand_leave_a_usable_spool(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, fsync=False)
    spool.open()
    for i in range(3):
        spool.append(i, payload(i))
    records = spool.read()
    spool.ack(records[1].end, 2)
    spool.close()
    for segment in tmp_path.glob("*.spool"):
        segment.unlink()  # an operator cleared the spool; the cursor file remains
    again = Spool(tmp_path, max_bytes=1 << 20, fsync=False)
    again.open()
    again.append(10, payload(10))
    assert drain(again) == [10]
