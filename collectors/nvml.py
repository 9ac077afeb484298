"""The NVML backend: every GPU, MIG instance and GPU process of this host, via ``pynvml``.

All NVML calls run on one dedicated daemon thread (never on the event loop, and a call the
driver never returns from does not keep the process from exiting); a read that takes
longer than ``timeout_s`` is reported as a retriable ``timeout`` and the next tick is
refused (``busy``) until the stuck call returns; so is opening NVML again after a close
while a call is stuck (never more than one thread waits on the driver). Errors on one
device are collected in ``Reading.errors`` and the other devices are still read; a device
with a fatal error (``gpu_lost``, ``reset_required``) is left out until the backend is
reopened; so is one that fails that way as NVML is opened (one that fails retriably then
is opened again at the next read), so one broken GPU never keeps the others from being
read (when no GPU can be opened, opening fails with the first one's error). An error of
NVML as a whole (no driver, a driver of another version, NVML uninitialised) fails the
read with a fatal error, so the collector reopens the backend; no device is left out for
it. Values a device lacks or NVML refuses to an unprivileged caller (``NO_PERMISSION``) are
skipped; in MIG mode the parent's memory, which NVML gives only to a privileged caller,
is otherwise the sum of its instances'.

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
import queue
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from dprobe.abandoned_futures import read_failure
from dprobe.collectors.backend import GpuReading, ProcReading, Reading
from dprobe.collectors.errors import BackendError
from dprobe.collectors.nvml_errors import DRIVER_WIDE, NOT_FOUND, UNAVAILABLE, to_backend_error
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


def _index(dev: _Device) -> int:
    return dev.index


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_Call = tuple[concurrent.futures.Future[Any], Any, tuple[Any, ...]]


class _NvmlThread:
    """One daemon thread running the calls submitted to it, in order.

    Unlike an executor's thread it is not joined at interpreter exit, so a call stuck in
    the driver cannot keep a stopped collector alive.
    """

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._last: concurrent.futures.Future[Any] | None = None
        threading.Thread(target=self._serve, name="dprobe-nvml", daemon=True).start()

    @property
    def busy(self) -> bool:
        """Whether a call submitted is still running or waiting (calls run in order)."""
        return self._last is not None and not self._last.done()

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._last = fut
        self._calls.put((fut, fn, args))
        return fut

    def stop(self) -> None:
        """End the thread once the calls before this one are done (or given up on)."""
        self._calls.put(None)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            fut, fn, args = call
            if not fut.set_running_or_notify_cancel():
                continue  # given up on (timed out) before it started
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                fut.set_exception(exc)
            else:
                fut.set_result(result)


class NvmlBackend(AsyncResource):
    """Reads NVML on a dedicated thread. ``nvml`` injects a module (tests use a fake)."""

    name = "nvml"

    def __init__(self, nvml: ModuleType | Any | None = None, timeout_s: float = 5.0) -> None:
        self._nvml = nvml
        self.timeout_s = timeout_s
        self._thread: _NvmlThread | None = None
        self._stuck: _NvmlThread | None = None  # closed while a call hung in the driver
        self._devices: list[_Device] = []
        self._last_seen: dict[str, int] = {}
        self._lost: set[str] = set()
        self._unopened: dict[int, BackendError] = {}  # GPU index -> why it is not opened
        self._unopened_said: set[int] = set()  # of those, fatal ones counted in a reading
        self._inflight: asyncio.Future[Reading] | None = None
        self._errors: tuple[type[BaseException], ...] = ()
        self._initialised = False

    async def _call(self, fn: Any, *args: Any) -> Any:
        if self._thread is None:
            self._thread = _NvmlThread()
        return await asyncio.wrap_future(self._thread.submit(fn, *args))

    async def open(self) -> None:
        """Load NVML and list the devices; raises a fatal ``no_driver`` without a driver,
        and a retriable ``busy`` while a call of before the last close is still stuck."""
        if self._stuck is not None and self._stuck.busy:
            raise BackendError("a previous NVML call is still running", kind="busy", retriable=True)
        self._stuck = None
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
        self._devices = []
        self._unopened = {}
        self._unopened_said = set()
        self._lost.clear()
        for i in range(nvml.nvmlDeviceGetCount()):
            self._open_device(i)
        if self._unopened and not self._devices:  # nothing to read: say why, as before
            raise next(iter(self._unopened.values()))
        log.info(
            "NVML: %d GPU(s): %s", len(self._devices), ", ".join(d.uuid for d in self._devices)
        )

    def _open_device(self, index: int) -> BackendError | None:
        """Add GPU ``index`` to the devices read; its error when it cannot be opened (it is
        left out: for good after a fatal error, else until a later read opens it). An
        error of NVML as a whole is raised."""
        nvml = self._nvml
        assert nvml is not None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            name = _text(nvml.nvmlDeviceGetName(handle))
        except self._errors as exc:
            err = to_backend_error(exc, device=str(index))
            if err.kind in DRIVER_WIDE:
                raise
            if index not in self._unopened:
                log.error("GPU %d cannot be opened, left out: %s", index, err)  # noqa: TRY400
            self._unopened[index] = err
            return err
        self._unopened.pop(index, None)
        self._devices = sorted([*self._devices, _Device(index, handle, uuid, name)], key=_index)
        return None

    async def read(self) -> Reading:
        """Read every device; raises a retriable ``timeout`` or ``busy`` BackendError, or a
        fatal one when NVML as a whole failed (the backend must be reopened)."""
        if not self._initialised:
            raise BackendError("NVML backend is not open", kind="uninitialized", retriable=True)
        if self._inflight is not None and not self._inflight.done():
            raise BackendError("previous NVML read still running", kind="busy", retriable=True)
        fut: asyncio.Future[Reading] = asyncio.ensure_future(self._call(self._read_sync))
        fut.add_done_callback(read_failure)  # a read abandoned at the timeout
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
        if self._thread is not None:
            self._thread.stop()
            if self._thread.busy:  # it ends once the driver returns; open() waits for that
                self._stuck = self._thread
            self._thread = None

    # everything below runs on the NVML thread
    def _read_sync(self) -> Reading:
        reading = Reading()
        for index, err in list(self._unopened.items()):
            if not err.retriable:  # left out until NVML is opened again: counted once
                if index not in self._unopened_said:
                    self._unopened_said.add(index)
                    reading.errors.append(err)
                continue
            try:
                failed = self._open_device(index)
            except self._errors as exc:
                raise self._whole(to_backend_error(exc, device=str(index))) from None
            if failed is not None:
                reading.errors.append(failed)
        for dev in self._devices:
            if dev.uuid in self._lost:
                continue
            try:
                self._read_device(dev, reading)
            except self._errors as exc:
                err = to_backend_error(exc, device=dev.uuid)
                if err.kind in DRIVER_WIDE:  # not this GPU: NVML must be initialised again
                    raise self._whole(err) from None
                if not err.retriable:
                    self._lost.add(dev.uuid)
                    log.error("leaving GPU %s out until restart: %s", dev.uuid, err)  # noqa: TRY400
                reading.errors.append(err)
        return reading

    @staticmethod
    def _whole(err: BackendError) -> BackendError:
        """The fatal error of a read that met a failure of NVML as a whole."""
        return BackendError(f"NVML failed as a whole: {err}", kind=err.kind, retriable=False)

    def _optional(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, or None where the device, the driver or the caller's rights lack it."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:  # type: ignore[union-attr]
            if getattr(exc, "value", None) in UNAVAILABLE:
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
        # in MIG mode NVML gives the parent's memory to a privileged caller only
        mem = (
            self._optional(nvml.nvmlDeviceGetMemoryInfo, h)
            if mig
            else nvml.nvmlDeviceGetMemoryInfo(h)
        )
        rates = None if mig else self._optional(nvml.nvmlDeviceGetUtilizationRates, h)
        power_mw = self._optional(nvml.nvmlDeviceGetPowerUsage, h)
        clock = self._optional(nvml.nvmlDeviceGetClockInfo, h, _CLOCK_SM)
        parent = GpuReading(
            uuid=dev.uuid,
            index=dev.index,
            util=float(rates.gpu) if rates is not None else 0.0,
            mem_util=float(rates.memory) if rates is not None else 0.0,
            mem_used=float(mem.used) if mem is not None else 0.0,
            mem_total=float(mem.total) if mem is not None else 0.0,
            power_w=power_mw / 1000.0 if power_mw is not None else 0.0,
            sm_clock_mhz=float(clock) if clock is not None else None,
            name=dev.name,
        )
        gpus.append(parent)
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
                instance = self._optional(nvml.nvmlDeviceGetGpuInstanceId, mh)
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
                        mig_instance=int(instance) if instance is not None else None,
                    )
                )
                procs += self._processes(mh, muuid, with_util=False)
            if mem is None:  # the parent's memory is that of its instances
                parent.mem_used = sum(g.mem_used for g in gpus[1:])
                parent.mem_total = sum(g.mem_total for g in gpus[1:])
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
                if getattr(exc, "value", None) not in (NOT_FOUND, 0, *UNAVAILABLE):
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
