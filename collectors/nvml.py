"""The NVML backend: every GPU, MIG instance and GPU process of this host, via ``pynvml``.

All NVML calls run on one dedicated thread (never on the event loop); a read that takes
longer than ``timeout_s`` is reported as a retriable ``timeout`` and the next tick is
refused (``busy``) until the stuck call returns. Errors on one device are collected in
``Reading.errors`` and the other devices are still read; a device with a fatal error
(``gpu_lost``, ``reset_required``) is left out until the backend is reopened.

Per-process utilisation comes from ``nvmlDeviceGetProcessUtilization``, which returns only
the processes active since the ``lastSeenTimeStamp`` passed in (carried per device between
calls) and raises NotFound when there are none: a running process without a sample gets
0 %. MIG instances report memory only (NVML measures no utilisation there), with
``mig_parent`` set to the parent GPU's UUID. PIDs are host PIDs: in a container the
collector needs the host PID namespace.

Example (on a GPU node):
    >>> import asyncio
    >>> async def main() -> None:
    ...     async with NvmlBackend() as nvml:
    ...         reading = await nvml.read()
    ...         print([g.uuid for g in reading.gpus])
    >>> asyncio.run(main())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from dprobe.collectors.backend import GpuReading, ProcReading, Reading
from dprobe.collectors.errors import BackendError
from dprobe.collectors.nvml_errors import NOT_FOUND, UNSUPPORTED, to_backend_error
from dprobe.lifecycle import AsyncResource

log = logging.getLogger(__name__)

_MIG_ENABLE = 1
_CLOCK_SM = 1


@dataclass(slots=True)
class _Device:
    index: int
    handle: Any
    uuid: str
    name: str


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend(AsyncResource):
    """Reads NVML on a dedicated thread. ``nvml`` injects a module (tests use a fake)."""

    name = "nvml"

    def __init__(self, nvml: ModuleType | Any | None = None, timeout_s: float = 5.0) -> None:
        self._nvml = nvml
        self.timeout_s = timeout_s
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._devices: list[_Device] = []
        self._last_seen: dict[str, int] = {}
        self._lost: set[str] = set()
        self._inflight: asyncio.Future[Reading] | None = None
        self._errors: tuple[type[BaseException], ...] = ()
        self._initialised = False

    async def _call(self, fn: Any, *args: Any) -> Any:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="dprobe-nvml"
            )
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def open(self) -> None:
        """Load NVML and list the devices; raises a fatal ``no_driver`` without a driver."""
        if self._nvml is None:
            import pynvml

            self._nvml = pynvml
        nvml = self._nvml
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self._errors = (nvml.NVMLError, mismatch) if mismatch else (nvml.NVMLError,)
        try:
            await asyncio.wait_for(self._call(self._open_sync), self.timeout_s)
        except TimeoutError:
            raise BackendError(
                "NVML did not initialise in time", kind="timeout", retriable=True
            ) from None
        except self._errors as exc:
            raise to_backend_error(exc) from None
        except OSError as exc:  # the library exists but cannot be loaded
            raise BackendError(
                f"NVML cannot be loaded: {exc}", kind="no_driver", retriable=False
            ) from None

    def _open_sync(self) -> None:
        nvml = self._nvml
        assert nvml is not None
        nvml.nvmlInit()
        self._initialised = True
        devices = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            devices.append(_Device(i, handle, uuid, _text(nvml.nvmlDeviceGetName(handle))))
        self._devices = devices
        self._lost.clear()
        log.info("NVML: %d GPU(s): %s", len(devices), ", ".join(d.uuid for d in devices))

    async def read(self) -> Reading:
        """Read every device; raises a retriable ``timeout`` or ``busy`` BackendError."""
        if not self._initialised:
            raise BackendError("NVML backend is not open", kind="uninitialized", retriable=True)
        if self._inflight is not None and not self._inflight.done():
            raise BackendError("previous NVML read still running", kind="busy", retriable=True)
        fut: asyncio.Future[Reading] = asyncio.ensure_future(self._call(self._read_sync))
        fut.add_done_callback(_consume)
        self._inflight = fut
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.timeout_s)
        except TimeoutError:
            raise BackendError(
                f"NVML read took longer than {self.timeout_s}s", kind="timeout", retriable=True
            ) from None

    async def close(self) -> None:
        """Shut NVML down and stop its thread (idempotent)."""
        if self._initialised and self._nvml is not None:
            self._initialised = False
            try:
                await asyncio.wait_for(self._call(self._nvml.nvmlShutdown), self.timeout_s)
            except TimeoutError:
                log.warning("nvmlShutdown did not return within %ss", self.timeout_s)
            except self._errors as exc:
                log.warning("nvmlShutdown failed: %s", exc)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # everything below runs on the NVML thread
    def _read_sync(self) -> Reading:
        reading = Reading()
        for dev in self._devices:
            if dev.uuid in self._lost:
                continue
            try:
                self._read_device(dev, reading)
            except self._errors as exc:
                err = to_backend_error(exc, device=dev.uuid)
                if not err.retriable:
                    self._lost.add(dev.uuid)
                    log.error("leaving GPU %s out until restart: %s", dev.uuid, err)  # noqa: TRY400
                reading.errors.append(err)
        return reading

    def _optional(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, or None where the device or the driver does not support it."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:  # type: ignore[union-attr]
            if getattr(exc, "value", None) in UNSUPPORTED:
                return None
            raise

    def _read_device(self, dev: _Device, reading: Reading) -> None:
        nvml = self._nvml
        assert nvml is not None
        h = dev.handle
        gpus: list[GpuReading] = []
        procs: list[ProcReading] = []
        mode = self._optional(nvml.nvmlDeviceGetMigMode, h)
        mig = bool(mode) and mode[0] == _MIG_ENABLE
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        rates = None if mig else self._optional(nvml.nvmlDeviceGetUtilizationRates, h)
        power_mw = self._optional(nvml.nvmlDeviceGetPowerUsage, h)
        clock = self._optional(nvml.nvmlDeviceGetClockInfo, h, _CLOCK_SM)
        gpus.append(
            GpuReading(
                uuid=dev.uuid,
                index=dev.index,
                util=float(rates.gpu) if rates is not None else 0.0,
                mem_util=float(rates.memory) if rates is not None else 0.0,
                mem_used=float(mem.used),
                mem_total=float(mem.total),
                power_w=power_mw / 1000.0 if power_mw is not None else 0.0,
                sm_clock_mhz=float(clock) if clock is not None else None,
                name=dev.name,
            )
        )
        if mig:
            for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                except nvml.NVMLError as exc:
                    if getattr(exc, "value", None) == NOT_FOUND:
                        continue  # slot without an instance
                    raise
                muuid = _text(nvml.nvmlDeviceGetUUID(mh))
                mmem = nvml.nvmlDeviceGetMemoryInfo(mh)
                gpus.append(
                    GpuReading(
                        uuid=muuid,
                        index=dev.index,
                        util=0.0,
                        mem_util=0.0,
                        mem_used=float(mmem.used),
                        mem_total=float(mmem.total),
                        power_w=0.0,
                        mig_parent=dev.uuid,
                        name=_text(nvml.nvmlDeviceGetName(mh)),
                    )
                )
                procs += self._processes(mh, muuid, with_util=False)
        else:
            procs += self._processes(h, dev.uuid, with_util=True)
        # only a fully read device enters the reading (no half devices)
        reading.gpus += gpus
        reading.procs += procs

    def _processes(self, handle: Any, uuid: str, *, with_util: bool) -> list[ProcReading]:
        nvml = self._nvml
        assert nvml is not None
        running = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        latest: dict[int, Any] = {}
        if with_util and running:
            try:
                samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen.get(uuid, 0))
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) not in (NOT_FOUND, 0, *UNSUPPORTED):
                    raise
                samples = []  # NotFound: no process was active since the last timestamp
            for s in samples:
                prev = latest.get(s.pid)
                if prev is None or s.timeStamp > prev.timeStamp:
                    latest[s.pid] = s
            if samples:
                self._last_seen[uuid] = max(s.timeStamp for s in samples)
        out = []
        for p in running:
            s = latest.get(p.pid)
            used = p.usedGpuMemory
            out.append(
                ProcReading(
                    pid=int(p.pid),
                    gpu=uuid,
                    sm_util=float(s.smUtil) if s is not None else 0.0,
                    mem_util=float(s.memUtil) if s is not None else 0.0,
                    mem_used=float(used) if used is not None else 0.0,
                )
            )
        return out


def _consume(fut: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of an abandoned (timed-out) read so asyncio does not warn."""
    if not fut.cancelled():
        fut.exception()
