"""The NVML backend on a real GPU and driver (skips where there is none)."""

from __future__ import annotations

import pytest

from dprobe.collectors.errors import BackendError
from dprobe.collectors.nvml import NvmlBackend
from dprobe.collectors.snapshot import SnapshotBuilder
from dprobe.schema import decode_snapshot, encode

pytestmark = pytest.mark.gpu


async def test_reads_every_gpu_of_this_host_into_a_valid_snapshot() -> None:
    pynvml = pytest.importorskip("pynvml")
    backend = NvmlBackend(timeout_s=10.0)
    try:
        await backend.open()
    except BackendError as exc:
        if exc.kind == "no_driver":
            pytest.skip(f"no NVIDIA driver here: {exc}")
        raise
    try:
        first = await backend.read()
        second = await backend.read()  # carries lastSeenTimeStamp; NotFound is not an error
    finally:
        await backend.close()

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        raw = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        uuids = {u.decode() if isinstance(u, bytes) else u for u in raw}
    finally:
        pynvml.nvmlShutdown()
    for reading in (first, second):
        assert reading.errors == []
        parents = {g.uuid for g in reading.gpus if g.mig_parent is None}
        assert parents == uuids
        faults: list[str] = []
        snap = SnapshotBuilder("gpu-test", None, faults.append)(
            reading, seq=0, ts=1.7e9, interval_s=1.0
        )
        assert faults == []
        assert decode_snapshot(encode(snap)) == snap  # within every bound of the contract
        for g in snap.gpus:
            assert g.mem_total > 0 and g.mem_used <= g.mem_total
