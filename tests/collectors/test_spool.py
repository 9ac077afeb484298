"""The disk spool: order, durability across reopen, torn tails, bound, drops; every record
appended is counted once, as delivered or dropped, and the rest is pending."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from dprobe.clock import ManualClock
from dprobe.collectors.assemble import build_collector
from dprobe.collectors.seq import SeqCounter
from dprobe.collectors.spool import _HEADER, Record, Spool
from dprobe.collectors.synthetic import SyntheticBackend
from dprobe.config import CollectorSettings
from dprobe.errors import UsageError


def _into(counts: list[int], reasons: set[str]) -> Callable[[int, str], None]:
    """An ``on_drop`` that notes each count and reason."""

    def note(n: int, reason: str) -> None:
        counts.append(n)
        reasons.add(reason)

    return note


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
    reasons: set[str] = set()
    drop = _into(dropped, reasons)
    spool = Spool(tmp_path, max_bytes=4000, segment_bytes=1000, fsync=False, on_drop=drop)
    spool.open()
    for i in range(100):
        spool.append(i, payload(i))
    assert spool.total_bytes <= 4000
    delivered = drain(spool)
    # what is left is the newest, contiguous run; every missing one was counted
    assert delivered == list(range(100 - len(delivered), 100))
    assert sum(dropped) == spool.dropped == 100 - len(delivered)
    assert reasons == {"spool_full"}


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


def test_a_write_cut_short_by_a_full_disk_leaves_no_torn_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk writes part of a record (os.write returns less) and then refuses the
    rest: append fails and the part is taken back, so records appended once there is
    room again are not cut off behind a torn one."""
    import errno

    from dprobe.collectors import spool as spool_module

    corrupt: list[int] = []
    spool = Spool(tmp_path, max_bytes=1 << 20, on_corrupt=corrupt.append)
    spool.open()
    spool.append(0, payload(0))
    real_write = os.write
    room = [50]  # bytes left on the disk

    def full_disk(fd: int, data: bytes) -> int:
        if fd != spool._fd:
            return real_write(fd, data)
        if not room[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = real_write(fd, bytes(data[: room[0]]))
        room[0] -= written
        return written

    monkeypatch.setattr(spool_module.os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        spool.append(1, payload(1))
    monkeypatch.setattr(spool_module.os, "write", real_write)  # room again
    spool.append(2, payload(2))
    assert drain(spool) == [0, 2]
    assert corrupt == [] and spool.dropped == 0
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


def flip_payload_byte(segment: Path, record: int) -> None:
    """Bit rot in the payload of the ``record``-th record of ``segment``."""
    data = bytearray(segment.read_bytes())
    pos = 0
    for _ in range(record):
        pos += _HEADER.size + _HEADER.unpack_from(data, pos)[0]
    data[pos + _HEADER.size] ^= 0xFF
    segment.write_bytes(bytes(data))


def test_records_behind_a_corrupt_one_are_counted_as_dropped(tmp_path: Path) -> None:
    dropped: list[int] = []
    reasons: set[str] = set()
    drop = _into(dropped, reasons)
    spool = Spool(tmp_path, max_bytes=1 << 20, fsync=False, on_drop=drop)
    spool.open()
    for i in range(5):
        spool.append(i, payload(i))
    (segment,) = tmp_path.glob("*.spool")
    flip_payload_byte(segment, 2)
    batch = spool.read()
    assert [r.seq for r in batch] == [0, 1]
    assert spool.pending_records == 2  # 2, 3 and 4 are gone: the scan cannot pass 2
    assert dropped == [3] and spool.dropped == 3
    assert reasons == {"spool_corrupt"}
    spool.ack(batch[-1].end, len(batch))
    assert spool.pending_records == 0 and spool.read() == []
    spool.append(5, payload(5))  # appends go on behind the cut
    assert drain(spool) == [5]


def _segment_dropped_in_flight(tmp_path: Path) -> tuple[Spool, list[Record], list[int]]:
    """A spool whose bound dropped segment 0 while a batch of 10 records (8 of segment 0,
    2 of segment 1) read from it is being sent; the spool, the batch and the drops so far."""
    dropped: list[int] = []
    drop = _into(dropped, set())
    spool = Spool(tmp_path, max_bytes=2500, segment_bytes=1000, fsync=False, on_drop=drop)
    spool.open()
    for i in range(12):  # segment 0 holds 8 records, segment 1 the next 4
        spool.append(i, payload(i))
    batch = spool.read(max_records=10)
    assert {r.end[0] for r in batch} == {0, 1}
    for i in range(12, 22):  # the bound drops segment 0 while the batch is sent
        spool.append(i, payload(i))
    assert not (tmp_path / f"{0:012d}.spool").exists()
    return spool, batch, dropped


def test_a_batch_whose_segment_is_dropped_in_flight_counts_as_delivered_once_acked(
    tmp_path: Path,
) -> None:
    spool, batch, dropped = _segment_dropped_in_flight(tmp_path)
    assert dropped == [] and spool.pending_records == 22 - 8
    spool.ack(batch[-1].end, len(batch))  # Kafka confirmed the batch
    assert dropped == [] and spool.pending_records == 22 - 10
    assert drain(spool) == list(range(10, 22))


def test_a_batch_whose_segment_is_dropped_in_flight_is_dropped_if_it_fails(
    tmp_path: Path,
) -> None:
    spool, _, dropped = _segment_dropped_in_flight(tmp_path)
    assert drain(spool) == list(range(8, 22))  # the batch failed: read again from the cursor
    assert dropped == [8] and spool.pending_records == 0


def on_disk(spool: Spool) -> dict[int, int]:
    """Segment id -> records on disk, read with the spool's framing (up to a corrupt one)."""
    out: dict[int, int] = {}
    for path in sorted(spool.directory.glob("*.spool")):
        data, pos, n = path.read_bytes(), 0, 0
        while pos + _HEADER.size <= len(data):
            length = _HEADER.unpack_from(data, pos)[0]
            pos += _HEADER.size + length
            n += 1
        out[int(path.name.removesuffix(".spool"))] = n
    return out


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 20)),
        st.tuples(st.just("read"), st.integers(1, 12)),  # the batch before it failed
        st.tuples(st.just("ack"), st.integers(0, 11)),  # ack the batch up to this record
        st.tuples(st.just("corrupt"), st.integers(0, 40)),  # bit rot in a spooled record
    ),
    min_size=4,
    max_size=50,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_every_record_is_delivered_or_dropped_exactly_once(script) -> None:
    with tempfile.TemporaryDirectory() as folder:
        dropped: list[int] = []
        reasons: set[str] = set()
        spool = Spool(
            folder, max_bytes=2500, segment_bytes=1000, fsync=False, on_drop=_into(dropped, reasons)
        )
        spool.open()
        written = 0
        delivered: list[int] = []
        batch: list[Record] = []
        for op, n in script:
            if op == "append":
                for _ in range(n):
                    spool.append(written, payload(written))
                    written += 1
            elif op == "read":
                batch = spool.read(max_records=n)
            elif op == "ack" and batch:
                done = batch[: min(n, len(batch) - 1) + 1]
                spool.ack(done[-1].end, len(done))
                delivered += [r.seq for r in done]
                batch = batch[len(done) :]
            elif op == "corrupt":
                segments = on_disk(spool)
                if segments and sum(segments.values()):
                    records = [(sid, i) for sid, k in segments.items() for i in range(k)]
                    sid, i = records[n % len(records)]
                    flip_payload_byte(spool.directory / f"{sid:012d}.spool", i)
            # records of the batch whose segment the bound deleted await Kafka's answer
            sending = sum(
                1 for r in batch if not (spool.directory / f"{r.end[0]:012d}.spool").exists()
            )
            assert written == len(delivered) + sum(dropped) + spool.pending_records + sending
        while records := spool.read(max_records=5):  # Kafka is back: drain everything
            spool.ack(records[-1].end, len(records))
            delivered += [r.seq for r in records]
        spool.close()
        assert spool.pending_records == 0 and sum(dropped) == spool.dropped
        assert written == len(delivered) + sum(dropped)
        assert delivered == sorted(set(delivered)) and set(delivered) <= set(range(written))
        again = Spool(folder, max_bytes=2500, segment_bytes=1000, fsync=False)
        again.open()
        assert again.pending_records == 0 and again.read() == []
        again.close()


def _no_room() -> None:
    import errno

    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _thirty_in_segments(folder: Path) -> Spool:
    spool = Spool(folder, max_bytes=1 << 20, segment_bytes=1000, fsync=False)
    spool.open()
    for seq in range(30):
        spool.append(seq, payload(seq))
    return spool


def test_acks_free_room_when_the_disk_cannot_save_the_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a full disk the sender's acks are what frees room: the delivered segments are
    deleted though the cursor cannot be saved, and a later ack saves it."""
    spool = _thirty_in_segments(tmp_path)
    segments = len(list(tmp_path.glob("*.spool")))
    monkeypatch.setattr(spool, "_save_cursor", _no_room)
    batch = spool.read(max_records=20)
    spool.ack(batch[-1].end, len(batch))  # no room for the cursor: no error either
    assert len(list(tmp_path.glob("*.spool"))) < segments  # delivered segments deleted
    assert spool.pending_records == 10
    monkeypatch.undo()  # room again: the next ack saves the cursor
    batch = spool.read(max_records=5)
    spool.ack(batch[-1].end, len(batch))
    spool.close()
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1000, fsync=False)
    again.open()
    assert drain(again) == list(range(25, 30))
    again.close()


def test_a_restart_before_the_cursor_is_saved_resends_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = _thirty_in_segments(tmp_path)
    monkeypatch.setattr(spool, "_save_cursor", _no_room)
    batch = spool.read(max_records=20)
    spool.ack(batch[-1].end, len(batch))
    spool.close()
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1000, fsync=False)
    again.open()  # the saved cursor's segment is gone: resent from the oldest one left
    resent = drain(again)
    assert resent == list(range(resent[0], 30)) and resent[0] <= 20
    again.close()


def test_a_segment_the_disk_cannot_create_leaves_the_spool_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting a new segment needs a new file; where the disk (or an inode quota) has no
    room for one, the record is refused and the active segment stays open: the records
    after it, once there is room, are written and read back, none lost or misplaced."""
    import errno

    from dprobe.collectors import spool as spool_module

    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1000, fsync=False)
    spool.open()
    real_open = os.open

    def no_new_files(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_CREAT and not os.path.exists(path):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), path)
        return real_open(path, flags, mode)

    appended = []
    monkeypatch.setattr(spool_module.os, "open", no_new_files)
    for seq in range(20):  # 100-byte payloads: the first segment holds 8
        try:
            spool.append(seq, payload(seq))
        except OSError as exc:
            assert exc.errno == errno.EDQUOT
        else:
            appended.append(seq)
    assert appended == list(range(8))
    monkeypatch.undo()
    for seq in range(20, 30):
        spool.append(seq, payload(seq))
    assert drain(spool) == [*range(8), *range(20, 30)]
    spool.close()
