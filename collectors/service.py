"""The collector service: one snapshot per tick, spooled, then sent by the sender.

Each tick (on the injected clock's cadence) reads the backend, cleans and attributes the
reading (:class:`SnapshotBuilder`), encodes the snapshot, and only then takes its ``seq``
and appends it to the spool, so a tick that fails before uses no seq; the sender
(:class:`KafkaSender`) moves the spool to Kafka in the background. Backend errors never
end the service: they are counted by kind and the tick is skipped (no seq is used); after
a fatal one the backend is reopened at the next tick. A process that cannot be attributed
(ended, hidden by a ``hidepid`` ``/proc``) is reported ``unassigned`` and counted as
``proc_vanished``. A snapshot the full disk has no room for (``ENOSPC``, ``EDQUOT``, in
the spool or the seq file) is lost and counted in ``dropped_snapshots_total{reason=
"disk_full"}``, and ticking goes on: the spool still sends what it holds, which frees
room. ``stop()`` finishes the tick in progress, flushes the spool to Kafka
for up to ``shutdown_timeout_s`` (whatever is left stays spooled for the next run) and
closes everything; it is idempotent.

Example:
    >>> async def main(collector: Collector) -> None:
    ...     async with collector:          # start(): open backend, spool, sender; tick
    ...         await collector.wait()     # until stop() (e.g. on SIGTERM) or a failure
    >>> # the pieces are wired by dprobe.collectors.assemble.build_collector(settings)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from dprobe.clock import Clock
from dprobe.collectors.backend import GpuBackend, Reading
from dprobe.collectors.errors import BackendError
from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.sender import KafkaSender
from dprobe.collectors.seq import SeqCounter
from dprobe.collectors.snapshot import SnapshotBuilder
from dprobe.collectors.spool import DISK_FULL, Spool
from dprobe.collectors.tenants import TenantResolver
from dprobe.count_text import count_of
from dprobe.lifecycle import AsyncService
from dprobe.schema import HostSnapshot, encode

log = logging.getLogger(__name__)


class Collector(AsyncService):
    """Ticks ``backend`` every ``interval_s`` (clock seconds) into ``spool`` and ``sender``.

    ``sender`` may be None (nothing is sent; the spool keeps everything), and
    ``on_snapshot`` sees every snapshot taken (used by ``--print`` and by tests).
    ``max_ticks`` ends the service by itself after that many ticks.
    """

    def __init__(
        self,
        backend: GpuBackend,
        *,
        host: str,
        interval_s: float,
        spool: Spool,
        seq: SeqCounter,
        metrics: CollectorMetrics,
        clock: Clock,
        sender: KafkaSender | None = None,
        resolver: TenantResolver | None = None,
        shutdown_timeout_s: float = 10.0,
        max_ticks: int | None = None,
        on_snapshot: Callable[[HostSnapshot], None] | None = None,
    ) -> None:
        self.backend = backend
        self.host = host
        self.interval_s = interval_s
        self.spool = spool
        self.seq = seq
        self.metrics = metrics
        metrics.known_backend(backend.name)
        self.clock = clock
        self.sender = sender
        self.shutdown_timeout_s = shutdown_timeout_s
        self.max_ticks = max_ticks
        self.on_snapshot = on_snapshot
        self.build = SnapshotBuilder(host, resolver, self._fault)
        self.ticks = 0
        self._backend_ok = False
        self._disk_full = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False

    def _fault(self, kind: str) -> None:
        self.metrics.sample_faults.labels(kind=kind).inc()

    def _backend_error(self, err: BackendError) -> None:
        self.metrics.backend_errors.labels(backend=self.backend.name, kind=err.kind).inc()

    # lifecycle
    async def start(self) -> None:
        """Open the backend (a fatal error here is raised: e.g. no NVIDIA driver), recover
        the spool and the seq, start the sender and the tick loop."""
        if self._started:
            return
        self._started = True
        await self.backend.open()
        self._backend_ok = True
        self.spool.open()
        floor = self.spool.last_seq + 1 if self.spool.last_seq is not None else 0
        self.seq.load(floor=floor)
        self.metrics.spool_bytes.set_function(lambda: self.spool.pending_bytes)
        self.metrics.spool_pending.set_function(lambda: self.spool.pending_records)
        if self.spool.pending_records:
            spooled = count_of(self.spool.pending_records, "snapshot")
            if self.sender is not None:
                log.info("%s in the spool to send first", spooled)
            else:
                log.info("%s in the spool (sending is off: they stay there)", spooled)
        if self.sender is not None:
            await self.sender.start()
        self._task = asyncio.create_task(self._loop(), name="dprobe-collector-ticks")

    async def wait(self) -> None:
        """Return when the tick loop ends (stop(), max_ticks); raise if it failed."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def request_stop(self) -> None:
        """Ask the tick loop to end after the tick in progress (safe from signal handlers)."""
        self._stop.set()

    async def stop(self) -> None:
        """End ticking, flush or spool everything, close (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([self._task])
        try:
            if self.sender is not None:
                await self.sender.stop(self.shutdown_timeout_s)
        finally:
            self.spool.close()
            await self.backend.close()

    # ticking
    async def _loop(self) -> None:
        next_at = self.clock.now()
        try:
            while not self._stop.is_set():
                await self.tick()
                if self.max_ticks is not None and self.ticks >= self.max_ticks:
                    break
                self._check_sender()
                next_at += self.interval_s
                now = self.clock.now()
                # fell behind (suspended, overloaded): skip, don't burst; the clock was
                # stepped back (NTP): never wait longer than one interval
                next_at = min(max(next_at, now), now + self.interval_s)
                sleeper = asyncio.ensure_future(self.clock.sleep(next_at - now))
                stopper = asyncio.ensure_future(self._stop.wait())
                await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
                for f in (sleeper, stopper):
                    f.cancel()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("collector tick loop failed")
            raise

    def _check_sender(self) -> None:
        if self.sender is not None and self.sender.failed is not None:
            raise RuntimeError("the Kafka sender stopped") from self.sender.failed

    async def tick(self) -> HostSnapshot | None:
        """Take, spool and announce one snapshot; None when the backend gave nothing or
        the disk had no room for it."""
        t0 = time.perf_counter()
        ts = self.clock.now()
        reading = await self._read()
        if reading is None:
            if not self._backend_ok:  # the GPUs cannot be read at all: no stale figures
                self.metrics.fleet.clear()
                self.metrics.gpus.set(0)
                self.metrics.processes.set(0)
            return None
        for err in reading.errors:
            self._backend_error(err)
        snap = self.build(reading, seq=self.seq.peek(), ts=ts, interval_s=self.interval_s)
        payload = encode(snap)
        # the gauges describe the GPUs as read, whether or not the disk has room for it
        self.metrics.fleet.observe(
            snap,
            {g.uuid: g.name for g in reading.gpus},
            {g.uuid: g.mig_instance for g in reading.gpus if g.mig_instance is not None},
        )
        self.metrics.gpus.set(len(snap.gpus))
        self.metrics.processes.set(len(snap.procs))
        if not self._spool(payload):
            return None
        self.ticks += 1
        self.metrics.snapshots.inc()
        if self.sender is not None:
            self.sender.notify()
        if self.on_snapshot is not None:
            self.on_snapshot(snap)
        self.metrics.tick_seconds.observe(time.perf_counter() - t0)
        return snap

    def _spool(self, payload: bytes) -> bool:
        """Take a seq (persisted before the record is spooled) and spool ``payload``;
        False when the disk is full: the snapshot is counted as dropped, and its seq is
        left unused, a gap that tells the worker a snapshot was lost."""
        try:
            seq = self.seq.next()
            self.spool.append(seq, payload)
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise
            self.metrics.dropped.labels(reason="disk_full").inc()
            if not self._disk_full:
                log.warning(
                    "no room on disk for snapshots (%s): they are dropped and counted until "
                    "there is room (spool %s)",
                    exc.strerror,
                    self.spool.directory,
                )
            self._disk_full = True
            return False
        if self._disk_full:
            log.warning("room on disk again: snapshots are spooled again")
            self._disk_full = False
        return True

    async def _read(self) -> Reading | None:
        if not self._backend_ok:
            try:
                await self.backend.close()
                await self.backend.open()
                self._backend_ok = True
                log.info("backend %s reopened", self.backend.name)
            except BackendError as err:
                self._backend_error(err)
                return None
        try:
            return await self.backend.read()
        except BackendError as err:
            self._backend_error(err)
            if not err.retriable:
                log.error("backend %s failed (%s): reopening it next tick", self.backend.name, err)  # noqa: TRY400
                self._backend_ok = False
            else:
                log.warning("backend %s: %s", self.backend.name, err)
            return None
        except Exception as exc:  # a backend is third-party code: count, keep ticking
            log.exception("backend %s raised unexpectedly", self.backend.name)
            self._backend_error(BackendError(str(exc), kind="unexpected", retriable=True))
            return None
