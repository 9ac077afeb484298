"""NvmlBackend against the in-memory fake pynvml: joins, MIG, errors, threading."""

from __future__ import annotations

import asyncio
import threading

import pytest

from dprobe.collectors.errors import BackendError
from dprobe.collectors.fake_nvml import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_TIMEOUT,
    FakeGpu,
    FakeNvml,
)
from dprobe.collectors.nvml import NvmlBackend
from dprobe.collectors.nvml_errors import to_backend_error

GIB = 1 << 30


def two_gpus() -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(
                uuid="GPU-a",
                util=87,
                mem_util=40,
                mem_used=20 * GIB,
                power_mw=312_500,
                sm_clock=1755,
                procs={101: 12 * GIB, 102: None},
            ),
            FakeGpu(uuid="GPU-b", util=0, procs={}),
        ]
    )


async def test_device_metrics_are_converted_to_snapshot_units() -> None:
    nvml = two_gpus()
    async with NvmlBackend(nvml) as backend:
        reading = await backend.read()
    a = {g.uuid: g for g in reading.gpus}["GPU-a"]
    assert (a.util, a.mem_util, a.mem_used, a.mem_total) == (87, 40, 20 * GIB, 80 * GIB)
    assert a.power_w == pytest.approx(312.5)  # NVML reports milliwatts
    assert a.sm_clock_mhz == 1755
    assert reading.errors == []


async def test_processes_join_samples_and_get_zero_without_one() -> None:
    nvml = two_gpus()
    nvml.add_sample(0, pid=101, sm=70, mem=25)
    async with NvmlBackend(nvml) as backend:
        procs = {p.pid: p for p in (await backend.read()).procs}
    assert (procs[101].sm_util, procs[101].mem_util, procs[101].mem_used) == (70, 25, 12 * GIB)
    # 102 runs but was not active since the last timestamp: 0 %, and its memory is unknown
    assert (procs[102].sm_util, procs[102].mem_used) == (0, 0)
    assert all(p.gpu == "GPU-a" for p in procs.values())


async def test_last_seen_timestamp_is_carried_between_reads() -> None:
    nvml = two_gpus()
    nvml.add_sample(0, pid=101, sm=70, mem=25)
    async with NvmlBackend(nvml) as backend:
        first = {p.pid: p.sm_util for p in (await backend.read()).procs}
        # no new sample: NVML raises NotFound for the carried timestamp -> 0 %, no error
        second = await backend.read()
        nvml.add_sample(0, pid=101, sm=33, mem=5)
        third = {p.pid: p.sm_util for p in (await backend.read()).procs}
    assert first[101] == 70
    assert {p.pid: p.sm_util for p in second.procs}[101] == 0
    assert second.errors == []
    assert third[101] == 33


async def test_latest_sample_of_a_pid_wins() -> None:
    nvml = two_gpus()
    nvml.add_sample(0, pid=101, sm=10, mem=1)
    nvml.add_sample(0, pid=101, sm=90, mem=9)
    async with NvmlBackend(nvml) as backend:
        procs = {p.pid: p for p in (await backend.read()).procs}
    assert procs[101].sm_util == 90


async def test_mig_instances_report_memory_only_with_their_parent() -> None:
    parent = FakeGpu(
        uuid="GPU-p",
        mig_enabled=True,
        mem_used=30 * GIB,
        mig=[
            FakeGpu(
                uuid="MIG-1",
                name="NVIDIA A100 MIG 3g.40gb",
                mem_used=9 * GIB,
                mem_total=40 * GIB,
                procs={7: 8 * GIB},
            ),
            FakeGpu(uuid="MIG-2", mem_used=0, mem_total=20 * GIB),
        ],
    )
    async with NvmlBackend(FakeNvml([parent])) as backend:
        reading = await backend.read()
    gpus = {g.uuid: g for g in reading.gpus}
    assert set(gpus) == {"GPU-p", "MIG-1", "MIG-2"}
    assert gpus["MIG-1"].mig_parent == "GPU-p" and gpus["GPU-p"].mig_parent is None
    assert (gpus["MIG-1"].mem_used, gpus["MIG-1"].mem_total) == (9 * GIB, 40 * GIB)
    assert gpus["MIG-1"].util == 0 and gpus["MIG-1"].name == "NVIDIA A100 MIG 3g.40gb"
    (proc,) = reading.procs
    assert (proc.pid, proc.gpu, proc.mem_used, proc.sm_util) == (7, "MIG-1", 8 * GIB, 0)
    assert reading.errors == []  # NotSupported utilisation on MIG is not an error


async def test_every_nvml_call_runs_on_one_dedicated_thread() -> None:
    nvml = two_gpus()
    async with NvmlBackend(nvml) as backend:
        for _ in range(3):
            await backend.read()
    threads = {t for _, t in nvml.calls}
    assert len(threads) == 1
    assert threads != {threading.current_thread().name}
    assert next(iter(threads)).startswith("dprobe-nvml")


async def test_no_driver_is_a_fatal_no_driver_error() -> None:
    with pytest.raises(BackendError) as info:
        await NvmlBackend(FakeNvml([], driver=False)).open()
    assert (info.value.kind, info.value.retriable) == ("no_driver", False)


async def test_lost_gpu_is_reported_and_left_out_others_still_read() -> None:
    nvml = two_gpus()
    async with NvmlBackend(nvml) as backend:
        nvml.fail("nvmlDeviceGetMemoryInfo", NVML_ERROR_GPU_IS_LOST, device=0)
        reading = await backend.read()
        nvml.heal()
        later = await backend.read()
    assert [g.uuid for g in reading.gpus] == ["GPU-b"]
    assert reading.procs == []  # the lost GPU's processes go with it
    (err,) = reading.errors
    assert (err.kind, err.retriable, err.device) == ("gpu_lost", False, "GPU-a")
    # a fatal device error keeps the device out until the backend is reopened
    assert [g.uuid for g in later.gpus] == ["GPU-b"]


async def test_nvml_timeout_code_on_one_device_is_retriable() -> None:
    nvml = two_gpus()
    async with NvmlBackend(nvml) as backend:
        nvml.fail("nvmlDeviceGetComputeRunningProcesses", NVML_ERROR_TIMEOUT, device=0)
        reading = await backend.read()
        nvml.heal()
        later = await backend.read()
    assert [(e.kind, e.retriable) for e in reading.errors] == [("timeout", True)]
    assert {g.uuid for g in later.gpus} == {"GPU-a", "GPU-b"}  # back next tick


async def test_hanging_nvml_times_out_then_refuses_while_busy() -> None:
    nvml = two_gpus()
    backend = NvmlBackend(nvml, timeout_s=5.0)  # opening must not time out on a busy machine
    await backend.open()
    backend.timeout_s = 0.05
    nvml.hang_s = 0.3
    with pytest.raises(BackendError) as first:
        await backend.read()
    with pytest.raises(BackendError) as second:
        await backend.read()
    assert (first.value.kind, first.value.retriable) == ("timeout", True)
    assert (second.value.kind, second.value.retriable) == ("busy", True)
    nvml.hang_s = 0.0
    backend.timeout_s = 2.0
    while True:  # the stuck call returns by itself; then reads work again
        try:
            reading = await backend.read()
            break
        except BackendError as exc:
            assert exc.kind == "busy"
            await asyncio.sleep(0.05)
    assert len(reading.gpus) == 2
    await backend.close()
    await backend.close()  # idempotent


@pytest.mark.parametrize(
    ("code", "kind", "retriable"),
    [
        (10, "timeout", True),
        (15, "gpu_lost", False),
        (12, "no_driver", False),
        (9, "no_driver", False),
        (1, "uninitialized", True),
        (16, "reset_required", False),
        (12345, "other", True),
    ],
)
def test_error_mapping(code: int, kind: str, retriable: bool) -> None:
    from dprobe.collectors.fake_nvml import NVMLError

    err = to_backend_error(NVMLError(code))
    assert (err.kind, err.retriable) == (kind, retriable)


def test_library_mismatch_is_fatal() -> None:
    from dprobe.collectors.fake_nvml import NVMLLibraryMismatchError

    err = to_backend_error(NVMLLibraryMismatchError("mismatch"))
    assert (err.kind, err.retriable) == ("driver_mismatch", False)


def test_mapping_agrees_with_the_real_pynvml_codes() -> None:
    pynvml = pytest.importorskip("pynvml")
    assert to_backend_error(pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)).kind == "timeout"
    assert to_backend_error(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)).kind == "gpu_lost"
    assert to_backend_error(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)).kind == "not_found"


async def test_calls_an_older_driver_lacks_are_treated_as_unsupported() -> None:
    nvml = two_gpus()
    nvml.add_sample(0, pid=101, sm=70, mem=25)
    async with NvmlBackend(nvml) as backend:
        for fn in (
            "nvmlDeviceGetMigMode",
            "nvmlDeviceGetClockInfo",
            "nvmlDeviceGetProcessUtilization",
        ):
            nvml.fail(fn, 13)  # NVML_ERROR_FUNCTION_NOT_FOUND
        reading = await backend.read()
    assert reading.errors == []
    a = {g.uuid: g for g in reading.gpus}["GPU-a"]
    assert a.sm_clock_mhz is None and a.util == 87
    assert {p.pid: p.sm_util for p in reading.procs} == {101: 0, 102: 0}
