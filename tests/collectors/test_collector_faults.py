"""Backend faults never crash the collector; each is counted in its metrics."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dprobe.clock import ManualClock, SystemClock
from dprobe.collectors.backend import GpuReading, ProcReading, Reading
from dprobe.collectors.errors import BackendError
from dprobe.collectors.fake_nvml import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_TIMEOUT,
    FakeGpu,
    FakeNvml,
)
from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.nvml import NvmlBackend
from dprobe.collectors.seq import SeqCounter
from dprobe.collectors.service import Collector
from dprobe.collectors.spool import Spool
from dprobe.collectors.tenant_map import TenantMap
from dprobe.collectors.tenants import TenantResolver
from dprobe.schema import decode_snapshot

GIB = 1 << 30


class ScriptedBackend:
    """Returns (or raises) one scripted item per read; then repeats the last good one."""

    name = "scripted"

    def __init__(self, script: list[Reading | BaseException]) -> None:
        self.script = list(script)
        self.opened = 0

    async def open(self) -> None:
        self.opened += 1

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> ScriptedBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> Reading:
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def gpu(util: float = 50.0, mem_used: float = GIB, uuid: str = "GPU-0") -> GpuReading:
    return GpuReading(uuid, 0, util, 10.0, mem_used, 80 * GIB, 200.0)


def collector_for(
    backend, tmp_path: Path, ticks: int, resolver=None, clock=None, interval_s: float = 1.0
) -> tuple[Collector, CollectorRegistry]:
    registry = CollectorRegistry()
    c = Collector(
        backend,
        host="h1",
        interval_s=interval_s,
        spool=Spool(tmp_path / "spool", max_bytes=1 << 20, fsync=False),
        seq=SeqCounter(tmp_path / "seq", fsync=False),
        metrics=CollectorMetrics(registry),
        clock=clock or ManualClock(),
        resolver=resolver,
        max_ticks=ticks,
    )
    return c, registry


async def driven(backend, tmp_path: Path) -> tuple[Collector, CollectorRegistry]:
    """A started collector that ticked once and then sleeps an hour: the test drives the
    ticks (``await c.tick()``)."""
    c, reg = collector_for(backend, tmp_path, ticks=10**6, clock=SystemClock(), interval_s=3600)
    ticked = asyncio.Event()
    c.on_snapshot = lambda snap: ticked.set()
    await c.start()
    await ticked.wait()
    return c, reg


def gpu_util(registry: CollectorRegistry) -> float | None:
    """The exported utilisation of the GPU that :func:`gpu` reads by default."""
    labels = {"gpu": "0", "UUID": "GPU-0", "Hostname": "h1", "modelName": ""}
    labels |= {"GPU_I_PROFILE": "", "GPU_I_ID": ""}  # a whole GPU
    return registry.get_sample_value("dprobe_gpu_utilization_percent", labels)


def spooled(spool: Spool) -> list:
    return [decode_snapshot(r.payload) for r in spool.read(max_records=10_000)]


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_bad_values_and_vanished_processes_are_repaired_and_counted(
    tmp_path, proc_tree
) -> None:
    proc_tree.add(11, "0::/research.slice/a.service\n")
    # pid 12 is listed by the backend but has no /proc entry: it vanished mid-sample
    resolver = TenantResolver(proc_root=proc_tree.root, pod_log_dir=None)
    script = [
        Reading(gpus=[gpu(util=math.nan)]),
        Reading(gpus=[gpu(mem_used=-5.0)]),
        Reading(gpus=[gpu(util=250.0)]),
        Reading(
            gpus=[gpu()],
            procs=[ProcReading(11, "GPU-0", 40, 5, GIB), ProcReading(12, "GPU-0", 30, 5, GIB)],
        ),
        Reading(gpus=[gpu()], procs=[ProcReading(11, "GPU-0", math.inf, -1, GIB)]),
    ]
    c, reg = collector_for(ScriptedBackend(script), tmp_path, ticks=5, resolver=resolver)
    async with c:
        await c.wait()
    snaps = spooled(c.spool)  # every snapshot passes the schema's validation
    assert [s.seq for s in snaps] == [0, 1, 2, 3, 4]
    assert snaps[0].gpus[0].util == 0.0
    assert snaps[1].gpus[0].mem_used == 0
    assert snaps[2].gpus[0].util == 100.0
    # 12 vanished between listing and attribution: kept for this tick, unattributed
    assert [(p.pid, p.tenant, p.job) for p in snaps[3].procs] == [
        (11, "unassigned", "a.service"),
        (12, "unassigned", "pid-12"),
    ]
    assert (snaps[4].procs[0].sm_util, snaps[4].procs[0].mem_util) == (0.0, 0.0)
    faults = "dprobe_collector_sample_faults_total"
    assert value(reg, faults, kind="nan") == 2  # NaN util, inf sm_util
    assert value(reg, faults, kind="negative") == 2  # mem_used, mem_util
    assert value(reg, faults, kind="out_of_range") == 1
    assert value(reg, faults, kind="proc_vanished") == 1
    assert value(reg, "dprobe_collector_snapshots_total") == 5


async def test_a_process_hidden_by_hidepid_is_unassigned_and_ticking_goes_on(
    tmp_path, proc_tree, monkeypatch
) -> None:
    proc_tree.add(11, "0::/research.slice/a.service\n")
    proc_tree.add(12, "0::/research.slice/b.service\n")
    read_bytes = Path.read_bytes

    def denied(self: Path) -> bytes:  # /proc mounted with hidepid=1: EPERM for pid 12
        if self.parent == proc_tree.root / "12":
            raise PermissionError(1, "Operation not permitted", str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    resolver = TenantResolver(
        proc_root=proc_tree.root,
        tenant_map=TenantMap(slices={"research.slice": "vc-r"}),
        pod_log_dir=None,
    )
    procs = [ProcReading(11, "GPU-0", 40, 5, GIB), ProcReading(12, "GPU-0", 30, 5, GIB)]
    script = [Reading(gpus=[gpu()], procs=procs) for _ in range(3)]
    c, reg = collector_for(ScriptedBackend(script), tmp_path, ticks=3, resolver=resolver)
    async with c:
        await c.wait()
    snaps = spooled(c.spool)
    assert [s.seq for s in snaps] == [0, 1, 2]
    for snap in snaps:
        assert [(p.pid, p.tenant, p.job) for p in snap.procs] == [
            (11, "vc-r", "a.service"),
            (12, "unassigned", "pid-12"),
        ]
    assert value(reg, "dprobe_collector_sample_faults_total", kind="proc_vanished") == 3
    assert c.seq.peek() == 3


class BrokenResolver:
    """Fails on every process, as a bug in attribution would."""

    def resolve(self, pid: int) -> None:
        raise RuntimeError(f"cannot attribute {pid}")

    def retain(self, pids: object) -> None:
        return None


async def test_a_tick_that_fails_before_spooling_uses_no_seq(tmp_path) -> None:
    script = [Reading(gpus=[gpu()], procs=[ProcReading(11, "GPU-0", 40, 5, GIB)])]
    c, _ = collector_for(ScriptedBackend(script), tmp_path, ticks=1, resolver=BrokenResolver())
    async with c:
        with pytest.raises(RuntimeError, match="cannot attribute"):
            await c.wait()
    c, _ = collector_for(ScriptedBackend([Reading(gpus=[gpu()])]), tmp_path, ticks=1)
    async with c:  # the next run (the service restarted) goes on without a gap
        await c.wait()
    assert [s.seq for s in spooled(c.spool)] == [0]


async def test_backend_exceptions_skip_the_tick_without_using_a_seq(tmp_path) -> None:
    script: list = [
        Reading(gpus=[gpu()]),
        BackendError("slow", kind="timeout", retriable=True),
        BackendError("driver gone", kind="no_driver", retriable=False),
        ZeroDivisionError("a bug in a third-party backend"),
        Reading(gpus=[gpu()]),
        Reading(gpus=[gpu()]),
    ]
    backend = ScriptedBackend(script)
    c, reg = collector_for(backend, tmp_path, ticks=3)
    async with c:
        await c.wait()
    assert [s.seq for s in spooled(c.spool)] == [0, 1, 2]
    errors = "dprobe_collector_backend_errors_total"
    assert value(reg, errors, backend="scripted", kind="timeout") == 1
    assert value(reg, errors, backend="scripted", kind="no_driver") == 1
    assert value(reg, errors, backend="scripted", kind="unexpected") == 1
    assert backend.opened == 2  # reopened after the fatal error


async def test_nvml_gpu_lost_and_timeouts_are_counted_and_ticking_goes_on(tmp_path) -> None:
    nvml = FakeNvml(
        [
            FakeGpu(uuid="GPU-a", util=90, mem_used=10 * GIB, procs={}),
            FakeGpu(uuid="GPU-b", util=10, mem_used=1 * GIB, procs={}),
        ]
    )
    backend = NvmlBackend(nvml, timeout_s=5.0)  # generous: this machine may be busy
    c, reg = await driven(backend, tmp_path)
    first = await c.tick()
    nvml.fail("nvmlDeviceGetUtilizationRates", NVML_ERROR_TIMEOUT, device=1)
    second = await c.tick()
    nvml.heal()
    nvml.fail("nvmlDeviceGetMemoryInfo", NVML_ERROR_GPU_IS_LOST, device=0)
    third = await c.tick()
    nvml.heal()
    backend.timeout_s = 0.05
    nvml.hang_s = 0.2  # NVML stops answering: the read times out, then is refused as busy
    hung = await c.tick()
    refused = await c.tick()
    nvml.hang_s = 0.0
    backend.timeout_s = 5.0  # generous from here on: this machine may be busy
    after = None
    for _ in range(50):  # the stuck call returns by itself, then reads work again
        after = await c.tick()
        if after is not None:
            break
        await asyncio.sleep(0.1)
    assert after is not None
    await c.stop()
    assert {g.uuid for g in first.gpus} == {"GPU-a", "GPU-b"}
    assert {g.uuid for g in second.gpus} == {"GPU-a"}
    assert {g.uuid for g in third.gpus} == {"GPU-b"}
    assert hung is None and refused is None
    assert {g.uuid for g in after.gpus} == {"GPU-b"}  # the lost GPU stays out
    assert [first.seq, second.seq, third.seq, after.seq] == [1, 2, 3, 4]
    errors = "dprobe_collector_backend_errors_total"
    assert value(reg, errors, backend="nvml", kind="timeout") == 2  # device code + hang
    assert value(reg, errors, backend="nvml", kind="gpu_lost") == 1
    assert value(reg, errors, backend="nvml", kind="busy") >= 1
    assert value(reg, "dprobe_collector_gpus") == 1


class SteppedClock(ManualClock):
    """A manual clock that is stepped back an hour after the first sleep (like NTP)."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await super().sleep(seconds)
        if len(self.sleeps) == 1:
            self.advance(-3600.0)


async def test_a_clock_stepped_back_does_not_stall_ticking(tmp_path) -> None:
    clock = SteppedClock()
    script = [Reading(gpus=[gpu()]) for _ in range(4)]
    c, _ = collector_for(ScriptedBackend(script), tmp_path, ticks=4, clock=clock, interval_s=5.0)
    async with c:
        await c.wait()
    assert c.ticks == 4
    assert max(clock.sleeps) <= 5.0


async def test_gauges_of_gpus_that_cannot_be_read_are_not_left_stale(tmp_path) -> None:
    good = Reading([gpu(util=80.0)], [])
    slow = BackendError("read timed out", kind="timeout", retriable=True)
    lost = BackendError("the driver went away", kind="no_driver", retriable=False)
    backend = ScriptedBackend([good, good, slow, lost, good])
    c, reg = await driven(backend, tmp_path)

    assert await c.tick() is not None
    assert gpu_util(reg) == 80.0 and value(reg, "dprobe_collector_gpus") == 1
    assert await c.tick() is None  # a slow read: the last figures stand
    assert gpu_util(reg) == 80.0 and value(reg, "dprobe_collector_gpus") == 1
    assert await c.tick() is None  # nothing can be read now: nothing stale is exported
    assert gpu_util(reg) is None and value(reg, "dprobe_collector_gpus") == 0
    assert await c.tick() is not None  # reopened, read again
    assert gpu_util(reg) == 80.0 and value(reg, "dprobe_collector_gpus") == 1
    await c.stop()
    assert backend.opened == 2  # at start, and again after the fatal error


def test_every_fault_kind_the_collector_counts_exists_at_zero() -> None:
    reg = CollectorRegistry()
    CollectorMetrics(reg)
    for kind in ("orphan_proc", "duplicate_gpu", "proc_vanished", "spool_corrupt"):
        assert reg.get_sample_value("dprobe_collector_sample_faults_total", {"kind": kind}) == 0


@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT"])
async def test_a_full_disk_drops_snapshots_and_ticking_goes_on(
    tmp_path, monkeypatch, caplog, code
) -> None:
    """A snapshot the full disk (or an exhausted quota) has no room for is lost, counted
    and logged once; the collector ticks on and spools again once there is room."""
    import errno
    import logging
    import os

    from dprobe.collectors import spool as spool_module

    c, reg = collector_for(
        ScriptedBackend([Reading(gpus=[gpu()]) for _ in range(6)]), tmp_path, ticks=3
    )
    real_write = os.write
    attempts = [0]

    def filling_disk(fd: int, data: bytes) -> int:  # the 2nd to 4th snapshot find no room
        if fd == c.spool._fd:
            attempts[0] += 1
            if 2 <= attempts[0] <= 4:
                raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))
        return real_write(fd, data)

    monkeypatch.setattr(spool_module.os, "write", filling_disk)
    with caplog.at_level(logging.WARNING, logger="dprobe.collectors.service"):
        async with c:
            await c.wait()
    # three snapshots were lost: their seqs are gaps that tell the worker so
    assert [s.seq for s in spooled(c.spool)] == [0, 4, 5]
    assert value(reg, "dprobe_collector_dropped_snapshots_total", reason="disk_full") == 3
    assert value(reg, "dprobe_collector_snapshots_total") == 3
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings  # one when the disk fills, one when it has room
    assert "no room on disk" in warnings[0] and str(c.spool.directory) in warnings[0]
    assert "room on disk again" in warnings[1]


async def test_another_spool_write_error_still_stops_the_collector(tmp_path, monkeypatch) -> None:
    """Only a full disk is survived: an I/O error (a failing disk) ends the tick loop."""
    import errno
    import os

    from dprobe.collectors import spool as spool_module

    c, _ = collector_for(ScriptedBackend([Reading(gpus=[gpu()]) for _ in range(3)]), tmp_path, 3)
    real_write = os.write

    def failing_disk(fd: int, data: bytes) -> int:
        if fd == c.spool._fd:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_write(fd, data)

    monkeypatch.setattr(spool_module.os, "write", failing_disk)
    with pytest.raises(OSError, match="Input/output error"):
        async with c:
            await c.wait()


async def test_a_seq_file_the_full_disk_refuses_leaves_a_gap_and_fresh_gauges(
    tmp_path, monkeypatch
) -> None:
    """No room for the seq file: the snapshot is dropped and its seq is used up all the
    same (the gap tells the worker a snapshot was lost); the GPU gauges show each tick's
    reading, also the dropped one's, not the last one spooled."""
    import errno
    import os

    readings = [Reading(gpus=[gpu(util=u)]) for u in (10.0, 20.0, 30.0, 40.0)]
    c, reg = await driven(ScriptedBackend(readings), tmp_path)

    save = c.seq._save

    def no_room(value: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(c.seq, "_save", no_room)
    assert await c.tick() is None  # dropped: no room for the seq file
    assert gpu_util(reg) == 20.0
    monkeypatch.setattr(c.seq, "_save", save)
    assert await c.tick() is not None
    assert gpu_util(reg) == 30.0
    await c.stop()
    assert [s.seq for s in spooled(c.spool)] == [0, 2]
    assert value(reg, "dprobe_collector_dropped_snapshots_total", reason="disk_full") == 1
