"""Every snapshot the builder makes passes the contract, whatever a backend reads: a value
the contract refuses is repaired or left out (and counted), never sent to be dead-lettered
with the whole snapshot of its host."""

from __future__ import annotations

from dprobe.collectors.backend import GpuReading, ProcReading, Reading
from dprobe.collectors.snapshot import SnapshotBuilder
from dprobe.schema import HostSnapshot, decode, encode


def gpu(uuid: str, **kw: object) -> GpuReading:
    return GpuReading(uuid, 0, 50.0, 10.0, 1.0, 2.0, 100.0, **kw)  # type: ignore[arg-type]


def proc(pid: int, **kw: object) -> ProcReading:
    fields: dict[str, object] = {"tenant": "vc-a", "job": "j", **kw}
    return ProcReading(pid, "GPU-0", 10.0, 5.0, 1.0, **fields)  # type: ignore[arg-type]


def test_values_the_contract_refuses_are_repaired_or_left_out_and_counted() -> None:
    faults: list[str] = []
    build = SnapshotBuilder("h1", resolver=None, on_fault=faults.append)
    reading = Reading(
        gpus=[
            gpu("GPU-0"),
            gpu("GPU-" + "x" * 300),  # no id a consumer could hold
            gpu("MIG-1", mig_parent=""),
            gpu("MIG-2", mig_parent="GPU-" + "y" * 300),
        ],
        procs=[
            proc(1, model="m" * 300),
            proc(2, batch_size=2**40),
            proc(3, model="resnet50", batch_size=64),
        ],
    )
    snap = build(reading, seq=0, ts=1.7e9, interval_s=1.0)
    again = decode(encode(snap), HostSnapshot)  # the contract's own check
    assert [g.uuid for g in again.gpus] == ["GPU-0", "MIG-1", "MIG-2"]
    assert [g.mig_parent for g in again.gpus] == [None, None, None]
    assert [(p.pid, p.model, p.batch_size) for p in again.procs] == [
        (1, "m" * 256, None),
        (2, None, None),
        (3, "resnet50", 64),
    ]
    assert sorted(faults) == ["out_of_range"] * 4
