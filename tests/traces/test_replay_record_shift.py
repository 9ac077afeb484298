"""``shifted`` moves the event time inside the value of every record that decodes,
whatever its size: an archive holds records above the default 1 MiB message limit (a
worker whose max_message_bytes was raised took them), and a replay moved to now must
move their time too, or the worker reads them as data of long ago."""

from __future__ import annotations

from dprobe.schema import DEFAULT_MAX_BYTES, Gpu, HostSnapshot, Proc, decode, encode
from dprobe.traces.replay_record import ReplayRecord, shifted


def _snapshot(procs: int) -> HostSnapshot:
    gpu = Gpu(uuid="GPU-1", index=0, util=80, mem_util=40, mem_used=10, mem_total=80, power_w=3)
    return HostSnapshot(
        host="n1", ts=1000.0, interval_s=10.0, seq=7, gpus=(gpu,),
        procs=tuple(
            Proc(pid=i, gpu="GPU-1", tenant="vc-a", job=f"job-{i:06d}", sm_util=1, mem_util=1,
                 mem_used=1)
            for i in range(procs)
        ),
    )  # fmt: skip


def test_a_record_above_the_default_message_limit_is_moved_too() -> None:
    big = encode(_snapshot(12_000))
    assert len(big) > DEFAULT_MAX_BYTES
    moved = shifted(ReplayRecord(1000.0, "samples", b"n1", big), 500.0)
    snap = decode(moved.value, HostSnapshot, max_bytes=len(moved.value))
    assert (moved.ts, snap.ts) == (1500.0, 1500.0)
    assert snap.procs == _snapshot(12_000).procs and snap.seq == 7


def test_a_small_record_is_moved() -> None:
    raw = encode(_snapshot(2))
    moved = shifted(ReplayRecord(1000.0, "samples", b"n1", raw), -100.0)
    assert decode(moved.value, HostSnapshot).ts == moved.ts == 900.0


def test_fields_this_dprobe_does_not_know_are_kept() -> None:
    """A newer collector's optional fields (the contracts ignore unknown ones) are archived
    byte for byte; moved to now, the record keeps them, and only its time changes."""
    import json

    original = json.loads(encode(_snapshot(1)))
    original["rack"] = "r7"  # added by a newer producer
    original["gpus"][0]["ecc_errors"] = 3
    raw = json.dumps(original).encode()
    moved = shifted(ReplayRecord(1000.0, "samples", b"n1", raw), 250.0)
    assert json.loads(moved.value) == {**original, "ts": 1250.0}
    assert moved.ts == 1250.0
