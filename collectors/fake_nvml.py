"""An in-memory stand-in for the ``pynvml`` module, for tests on machines without a GPU.

It implements the calls :class:`~dprobe.collectors.nvml.NvmlBackend` makes, with NVML's
semantics (``nvmlDeviceGetProcessUtilization`` returns only samples newer than the
timestamp passed in and raises NotFound when there are none), and lets a test break
things: ``fail(function, code, device=index)`` makes a call raise that NVML error,
``hang_s`` makes every call sleep, ``driver=False`` makes ``nvmlInit`` fail like a host
without the driver library. ``calls`` records (function, thread name) for each call.

Example:
    >>> nvml = FakeNvml([FakeGpu(uuid="GPU-0", procs={42: 1 << 30})])
    >>> nvml.nvmlInit(); h = nvml.nvmlDeviceGetHandleByIndex(0)
    >>> nvml.nvmlDeviceGetUUID(h), [p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)]
    ('GPU-0', [42])
    >>> nvml.add_sample(0, pid=42, sm=80, mem=30)
    >>> [s.smUtil for s in nvml.nvmlDeviceGetProcessUtilization(h, 0)]
    [80]
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_DEVICE_MIG_ENABLE = 1
NVML_CLOCK_SM = 1


class NVMLError(Exception):
    """Like ``pynvml.NVMLError``: carries the return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class NVMLLibraryMismatchError(Exception):
    """Like ``pynvml.NVMLLibraryMismatchError`` (not an NVMLError subclass)."""


@dataclass
class FakeGpu:
    """One simulated GPU (or MIG instance, in ``mig`` of its parent). Units as NVML's."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util: int = 0
    mem_util: int = 0
    mem_used: int = 0
    mem_total: int = 80 << 30
    power_mw: int = 70_000
    sm_clock: int = 1980
    procs: dict[int, int | None] = field(default_factory=dict)  # pid -> usedGpuMemory
    mig: list[FakeGpu] = field(default_factory=list)
    mig_enabled: bool = False
    supports_power: bool = True
    gpu_instance_id: int | None = None  # of a MIG instance (default: its slot + 1)


@dataclass(frozen=True)
class _Handle:
    index: int
    mig: int | None = None


class FakeNvml:
    """A fake ``pynvml`` holding ``gpus``; see the module docstring."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_CLOCK_SM = NVML_CLOCK_SM

    def __init__(self, gpus: list[FakeGpu], *, driver: bool = True) -> None:
        self.gpus = gpus
        self.driver = driver
        self.hang_s = 0.0
        self.initialised = False
        self.calls: list[tuple[str, str]] = []
        self._failures: dict[tuple[str, int | None], int] = {}
        self._samples: dict[int, list[SimpleNamespace]] = {i: [] for i in range(len(gpus))}
        self._clock_us = 1_000_000

    # test controls
    def fail(self, function: str, code: int, device: int | None = None) -> None:
        """Make ``function`` raise ``NVMLError(code)`` (on ``device`` only, if given)."""
        self._failures[(function, device)] = code

    def heal(self) -> None:
        """Remove every injected failure and hang."""
        self._failures.clear()
        self.hang_s = 0.0

    def add_sample(self, index: int, *, pid: int, sm: int, mem: int) -> None:
        """Record a per-process utilisation sample on GPU ``index`` (timestamp = now)."""
        self._clock_us += 1_000
        self._samples[index].append(
            SimpleNamespace(
                pid=pid, timeStamp=self._clock_us, smUtil=sm, memUtil=mem, encUtil=0, decUtil=0
            )
        )

    def _enter(self, function: str, handle: _Handle | None = None) -> None:
        self.calls.append((function, threading.current_thread().name))
        if self.hang_s:
            time.sleep(self.hang_s)
        device = None if handle is None else handle.index
        code = self._failures.get((function, device), self._failures.get((function, None)))
        if code is not None:
            raise NVMLError(code)
        if function != "nvmlInit" and not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, h: _Handle) -> FakeGpu:
        gpu = self.gpus[h.index]
        return gpu if h.mig is None else gpu.mig[h.mig]

    # the pynvml API subset
    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if not self.driver:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        return _Handle(index)

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        self._enter("nvmlDeviceGetUUID", h)
        return self._gpu(h).uuid

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        self._enter("nvmlDeviceGetName", h)
        return self._gpu(h).name

    def nvmlDeviceGetMigMode(self, h: _Handle) -> tuple[int, int]:
        self._enter("nvmlDeviceGetMigMode", h)
        mode = int(self._gpu(h).mig_enabled)
        return mode, mode

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", h)
        return 7 if self._gpu(h).mig_enabled else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, i: int) -> _Handle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if i >= len(self._gpu(h).mig):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return _Handle(h.index, i)

    def nvmlDeviceGetGpuInstanceId(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", h)
        if h.mig is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gid = self._gpu(h).gpu_instance_id
        return h.mig + 1 if gid is None else gid

    def nvmlDeviceGetMemoryInfo(self, h: _Handle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo", h)
        g = self._gpu(h)
        return SimpleNamespace(total=g.mem_total, used=g.mem_used, free=g.mem_total - g.mem_used)

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates", h)
        g = self._gpu(h)
        if h.mig is not None or g.mig_enabled:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=g.util, memory=g.mem_util)

    def nvmlDeviceGetPowerUsage(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetPowerUsage", h)
        g = self._gpu(h)
        if not g.supports_power:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.power_mw

    def nvmlDeviceGetClockInfo(self, h: _Handle, clock_type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", h)
        return self._gpu(h).sm_clock

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=mem, gpuInstanceId=0, computeInstanceId=0)
            for pid, mem in self._gpu(h).procs.items()
        ]

    def nvmlDeviceGetProcessUtilization(self, h: _Handle, last_seen: int) -> list[Any]:
        self._enter("nvmlDeviceGetProcessUtilization", h)
        if h.mig is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        fresh = [s for s in self._samples[h.index] if s.timeStamp > last_seen]
        if not fresh:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return fresh
