"""The contract every GPU backend fulfils, and the raw readings it returns.

A backend reads every GPU and GPU process of one host. Readings are *raw*: values may be
NaN, negative or out of range, and a process may lack a tenant; the collector cleans,
counts and attributes them (:mod:`dprobe.collectors.snapshot`) before they become a
:class:`dprobe.schema.HostSnapshot`. A backend reports what failed on single devices in
``Reading.errors`` and raises :class:`~dprobe.collectors.errors.BackendError` when the
whole read failed.

Example:
    >>> import asyncio
    >>> from dprobe.collectors.synthetic import SyntheticBackend
    >>> from dprobe.clock import ManualClock
    >>> async def once(backend: GpuBackend) -> int:
    ...     async with backend:
    ...         return len((await backend.read()).gpus)
    >>> asyncio.run(once(SyntheticBackend(host="h1", gpus=2, clock=ManualClock())))
    2
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol, runtime_checkable

from dprobe.collectors.errors import BackendError


@dataclass(slots=True)
class GpuReading:
    """One GPU or MIG instance as read (units: %, bytes, watts, MHz). ``mig_instance`` is
    a MIG instance's GPU instance id (dcgm-exporter's ``GPU_I_ID``), when known."""

    uuid: str
    index: int
    util: float
    mem_util: float
    mem_used: float
    mem_total: float
    power_w: float
    sm_clock_mhz: float | None = None
    mig_parent: str | None = None
    name: str | None = None
    mig_instance: int | None = None


@dataclass(slots=True)
class ProcReading:
    """One GPU process as read. ``tenant``/``job`` are set only by backends that know them
    (the synthetic one); otherwise the collector resolves them from the pid."""

    pid: int
    gpu: str
    sm_util: float
    mem_util: float
    mem_used: float
    tenant: str | None = None
    job: str | None = None
    model: str | None = None
    batch_size: int | None = None
    amp: bool | None = None


@dataclass(slots=True)
class Reading:
    """Everything one read returned, plus the per-device errors it met on the way."""

    gpus: list[GpuReading] = field(default_factory=list)
    procs: list[ProcReading] = field(default_factory=list)
    errors: list[BackendError] = field(default_factory=list)


@runtime_checkable
class GpuBackend(Protocol):
    """A source of per-host GPU readings: ``open`` once, ``read`` every tick, ``close``.

    ``close`` is idempotent. ``read`` raises :class:`BackendError` when nothing could be
    read; its ``retriable`` flag tells the collector whether to simply try next tick or to
    reopen the backend.
    """

    name: str

    async def open(self) -> None: ...

    async def read(self) -> Reading: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> GpuBackend: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
