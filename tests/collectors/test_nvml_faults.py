"""NvmlBackend when NVML fails as a whole, refuses values to an unprivileged user, or hangs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from dprobe.clock import SystemClock
from dprobe.collectors.errors import BackendError
from dprobe.collectors.fake_nvml import FakeGpu, FakeNvml, NVMLError
from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.nvml import NvmlBackend
from dprobe.collectors.seq import SeqCounter
from dprobe.collectors.service import Collector
from dprobe.collectors.spool import Spool

GIB = 1 << 30
DRIVER_NOT_LOADED = 9
NO_PERMISSION = 4
LIB_RM_VERSION_MISMATCH = 18
# what a driver that went away fails with: every call on a device
DEVICE_CALLS = ("nvmlDeviceGetMigMode", "nvmlDeviceGetMemoryInfo")


def two_gpus() -> FakeNvml:
    return FakeNvml([FakeGpu(uuid="GPU-a", procs={101: GIB}), FakeGpu(uuid="GPU-b")])


def driver_gone(nvml: FakeNvml, code: int, device: int | None = None) -> None:
    for fn in DEVICE_CALLS:
        nvml.fail(fn, code, device=device)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (DRIVER_NOT_LOADED, "no_driver"),
        (LIB_RM_VERSION_MISMATCH, "driver_mismatch"),
        (1, "uninitialized"),  # NVML shut down under the collector
    ],
)
async def test_nvml_failing_as_a_whole_fails_the_read_fatally_and_a_reopen_recovers(
    code: int, kind: str
) -> None:
    nvml = two_gpus()
    backend = NvmlBackend(nvml)
    await backend.open()
    try:
        driver_gone(nvml, code)
        with pytest.raises(BackendError) as info:
            await backend.read()
        nvml.heal()  # the driver is back
        await backend.close()  # what the collector does after a fatal read
        await backend.open()
        reading = await backend.read()
    finally:
        await backend.close()
    assert (info.value.kind, info.value.retriable, info.value.device) == (kind, False, None)
    assert [g.uuid for g in reading.gpus] == ["GPU-a", "GPU-b"]  # no GPU was left out
    assert [p.pid for p in reading.procs] == [101]
    assert reading.errors == []
    assert sum(f == "nvmlInit" for f, _ in nvml.calls) == 2


async def test_a_driver_wide_error_on_one_gpu_fails_the_whole_read() -> None:
    # the library's state is the same for every GPU: the read stops at the first such error
    nvml = two_gpus()
    async with NvmlBackend(nvml) as backend:
        driver_gone(nvml, DRIVER_NOT_LOADED, device=1)
        with pytest.raises(BackendError) as info:
            await backend.read()
    assert (info.value.kind, info.value.retriable) == ("no_driver", False)


async def test_collector_reopens_nvml_every_tick_until_the_driver_is_back(tmp_path: Path) -> None:
    nvml = two_gpus()
    backend = NvmlBackend(nvml, timeout_s=5.0)  # generous: this machine may be busy
    registry = CollectorRegistry()
    c = Collector(
        backend,
        host="h1",
        interval_s=3600,  # ticks once at start, then sleeps: the test drives the ticks
        spool=Spool(tmp_path / "spool", max_bytes=1 << 20, fsync=False),
        seq=SeqCounter(tmp_path / "seq", fsync=False),
        metrics=CollectorMetrics(registry),
        clock=SystemClock(),
        max_ticks=10**6,
    )
    ticked = asyncio.Event()
    c.on_snapshot = lambda snap: ticked.set()

    def no_driver_errors() -> float | None:
        labels = {"backend": "nvml", "kind": "no_driver"}
        return registry.get_sample_value("dprobe_collector_backend_errors_total", labels)

    await c.start()
    try:
        await ticked.wait()
        driver_gone(nvml, DRIVER_NOT_LOADED)
        failed = [await c.tick() for _ in range(3)]
        errors = no_driver_errors()
        nvml.heal()
        back = await c.tick()
    finally:
        await c.stop()
    assert failed == [None, None, None]  # no snapshot (and no seq) while NVML is gone
    assert errors == 3  # counted every tick, not only the first
    assert back is not None
    assert [g.uuid for g in back.gpus] == ["GPU-a", "GPU-b"]
    assert [p.pid for p in back.procs] == [101]


class Unprivileged(FakeNvml):
    """NVML as a user without privileges sees it: a MIG GPU's own memory is refused."""

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        if h.mig is None and self._gpu(h).mig_enabled:
            self._enter("nvmlDeviceGetMemoryInfo", h)
            raise NVMLError(NO_PERMISSION)
        return super().nvmlDeviceGetMemoryInfo(h)


async def test_unprivileged_mig_gpu_is_read_with_its_instances_memory() -> None:
    mig = [
        FakeGpu(uuid="MIG-1", mem_used=3 * GIB, mem_total=40 * GIB, procs={42: 2 * GIB}),
        FakeGpu(uuid="MIG-2", mem_used=1 * GIB, mem_total=20 * GIB),
    ]
    nvml = Unprivileged(
        [
            FakeGpu(uuid="GPU-p", mig=mig, mig_enabled=True),
            FakeGpu(uuid="GPU-b", procs={7: GIB}),
        ]
    )
    async with NvmlBackend(nvml) as backend:
        readings = [await backend.read() for _ in range(3)]
    for reading in readings:  # every tick, not only the first
        gpus = {g.uuid: g for g in reading.gpus}
        assert set(gpus) == {"GPU-p", "MIG-1", "MIG-2", "GPU-b"}
        assert (gpus["GPU-p"].mem_used, gpus["GPU-p"].mem_total) == (4 * GIB, 60 * GIB)
        assert {p.pid: p.gpu for p in reading.procs} == {42: "MIG-1", 7: "GPU-b"}
        assert reading.errors == []


async def test_a_privileged_mig_gpu_reports_nvml_own_memory() -> None:
    mig = [FakeGpu(uuid="MIG-1", mem_used=3 * GIB, mem_total=40 * GIB)]
    nvml = FakeNvml([FakeGpu(uuid="GPU-p", mig=mig, mig_enabled=True, mem_used=5 * GIB)])
    async with NvmlBackend(nvml) as backend:
        reading = await backend.read()
    parent = {g.uuid: g for g in reading.gpus}["GPU-p"]
    assert (parent.mem_used, parent.mem_total) == (5 * GIB, 80 * GIB)


async def test_optional_values_refused_to_the_caller_are_skipped_not_the_gpu() -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-a", util=60, procs={101: GIB})])
    nvml.add_sample(0, pid=101, sm=70, mem=25)
    for fn in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetClockInfo"):
        nvml.fail(fn, NO_PERMISSION)
    async with NvmlBackend(nvml) as backend:
        reading = await backend.read()
    (gpu,) = reading.gpus
    assert (gpu.util, gpu.power_w, gpu.sm_clock_mhz) == (60, 0.0, None)
    assert [(p.pid, p.sm_util) for p in reading.procs] == [(101, 70)]
    assert reading.errors == []


def test_a_hanging_nvml_call_does_not_keep_the_process_from_exiting() -> None:
    code = textwrap.dedent(
        """
        import asyncio
        from dprobe.collectors.errors import BackendError
        from dprobe.collectors.fake_nvml import FakeGpu, FakeNvml
        from dprobe.collectors.nvml import NvmlBackend

        async def main():
            nvml = FakeNvml([FakeGpu(uuid="GPU-0")])
            backend = NvmlBackend(nvml, timeout_s=5.0)
            await backend.open()
            backend.timeout_s = 0.2
            nvml.hang_s = 3600  # the driver never returns from the next call
            try:
                await backend.read()
            except BackendError as exc:
                print(exc.kind)
            await backend.close()  # what the collector does on SIGTERM

        asyncio.run(main())
        """
    )
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "timeout"), done.stderr
    assert time.monotonic() - t0 < 30  # the import takes most of it; a hang would be an hour


def nvml_threads() -> int:
    return sum(t.name == "dprobe-nvml" and t.is_alive() for t in threading.enumerate())


async def test_reopening_a_hanging_nvml_refuses_while_busy_instead_of_a_thread_per_tick() -> None:
    nvml = two_gpus()
    backend = NvmlBackend(nvml, timeout_s=5.0)
    before = nvml_threads()
    await backend.open()
    try:
        backend.timeout_s = 0.05
        nvml.hang_s = 1.0  # the driver hangs: every call takes far longer than the timeout
        kinds = []
        for _ in range(6):  # what the collector does every tick after a fatal error
            await backend.close()
            try:
                await backend.open()
            except BackendError as exc:
                kinds.append(exc.kind)
        stuck = nvml_threads() - before
        nvml.hang_s = 0.0
        backend.timeout_s = 5.0
        deadline = time.monotonic() + 10
        while True:  # once the stuck call returns, NVML opens again
            await backend.close()
            try:
                await backend.open()
                break
            except BackendError as exc:
                assert exc.kind == "busy" and time.monotonic() < deadline
                await asyncio.sleep(0.05)
        reading = await backend.read()
    finally:
        await backend.close()
    assert stuck <= 1  # one thread waits on the driver, not one more per tick
    assert len(kinds) == 6 and set(kinds) <= {"timeout", "busy"}  # retriable, every tick
    assert [g.uuid for g in reading.gpus] == ["GPU-a", "GPU-b"]


async def test_a_gpu_that_cannot_be_opened_is_left_out_not_every_gpu() -> None:
    # a GPU fallen off the bus fails already when NVML is opened: the others are read
    nvml = FakeNvml([FakeGpu(uuid="GPU-a", procs={101: GIB}), FakeGpu(uuid="GPU-b")])
    nvml.fail("nvmlDeviceGetUUID", 15, device=1)  # NVML_ERROR_GPU_IS_LOST
    async with NvmlBackend(nvml) as backend:
        first = await backend.read()
        second = await backend.read()
    assert [g.uuid for g in first.gpus] == ["GPU-a"] == [g.uuid for g in second.gpus]
    assert [p.pid for p in first.procs] == [101]
    assert [(e.kind, e.retriable, e.device) for e in first.errors] == [("gpu_lost", False, "1")]
    assert second.errors == []  # counted once, like a GPU lost while read


async def test_a_gpu_that_could_not_be_opened_for_now_is_opened_at_a_later_read() -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b")])
    nvml.fail("nvmlDeviceGetUUID", 10, device=1)  # NVML_ERROR_TIMEOUT: may pass next time
    async with NvmlBackend(nvml) as backend:
        first = await backend.read()
        nvml.heal()
        second = await backend.read()
    assert [g.uuid for g in first.gpus] == ["GPU-a"]
    assert [(e.kind, e.retriable) for e in first.errors] == [("timeout", True)]
    assert [g.uuid for g in second.gpus] == ["GPU-a", "GPU-b"] and second.errors == []


async def test_nvml_with_no_gpu_that_can_be_opened_fails_to_open_naming_why() -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b")])
    nvml.fail("nvmlDeviceGetUUID", NO_PERMISSION)  # e.g. a unit whose DeviceAllow= lacks them
    backend = NvmlBackend(nvml)
    with pytest.raises(BackendError) as info:
        await backend.open()
    await backend.close()
    assert (info.value.kind, info.value.device) == ("no_permission", "0")
