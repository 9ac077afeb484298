"""Run the faust worker of :mod:`dprobe.streams.app` in the foreground until SIGTERM/SIGINT.

Example:
    >>> from dprobe.config import WorkerSettings
    >>> run_worker(WorkerSettings())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from pathlib import Path
from typing import IO, Any

import faust
from prometheus_client import CollectorRegistry

from dprobe.config import WorkerSettings
from dprobe.errors import UsageError
from dprobe.folders import check_writable
from dprobe.sinks.consumer_lag import ConsumerLag
from dprobe.sinks.metrics_server import Heartbeat, MetricsServer
from dprobe.sinks.worker_metrics import WorkerCollector, export_loop_silence
from dprobe.streams.app import WorkerApp, build_app
from dprobe.streams.provision import ensure_topics
from dprobe.streams.shutdown_deadline import ShutdownDeadline
from dprobe.streams.startup_stop import StartupStop, StoppedBeforeStartError
from dprobe.streams.topics import TopicNames

log = logging.getLogger(__name__)


class _Worker(ShutdownDeadline, faust.Worker):
    """faust's worker, gone within ``shutdown_timeout_s`` of a stop signal, without faust's
    terminal spinner (it writes cursor escape codes to the log even when that is a file or
    the journal)."""

    startup: StartupStop | None = None  # the handlers before faust's, which may hold a stop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spinner = None

    def install_signal_handlers(self) -> None:
        """faust's handlers; a stop signal that came since the startup's handlers ended
        (:meth:`StartupStop.hand_over`) is handed to them: the worker stops cleanly."""
        super().install_signal_handlers()
        noted = self.startup.noted if self.startup is not None else None
        if noted is not None:
            log.info("%s received while the worker started: stopping", noted.name)
            self._schedule_shutdown(noted)


def run_worker(s: WorkerSettings, *, loglevel: str = "INFO") -> int:
    """Create missing topics, build the app and run it; returns the exit code."""
    loop = asyncio.get_event_loop()
    _make_data_dir(s)
    lock = lock_data_dir(s)  # held as long as this process runs
    try:
        return _run(s, loop, loglevel)
    finally:
        lock.close()


def _run(s: WorkerSettings, loop: asyncio.AbstractEventLoop, loglevel: str) -> int:
    registry = CollectorRegistry()
    heartbeat = Heartbeat(stale_s=s.health_stale_s)
    beating = loop.create_task(heartbeat.run())  # runs as long as the loop: faust's too
    server = _serve_metrics(s, registry, heartbeat)  # a busy port is said before Kafka
    try:
        with StartupStop(loop) as stop:  # SIGTERM, Ctrl-C: until faust handles them
            stop.check("loading")
            waiting = f"waiting for Kafka at {s.kafka.bootstrap}"
            partitions = stop.run(ensure_topics(s, joining=True), waiting)
            names = TopicNames.from_settings(s)
            worker_app = build_app(s, samples_partitions=partitions[names.samples])
            _measure(worker_app, registry)
            worker = _Worker(
                worker_app.app,
                shutdown_timeout_s=s.shutdown_timeout_s,
                loop=loop,
                loglevel=loglevel,
                quiet=True,
                override_logging=False,
                redirect_stdouts=False,
            )
            stop.check("starting")
            worker.startup = stop
            stop.hand_over()  # a stop signal from here on is noted for faust's handlers
    except StoppedBeforeStartError:
        _stop(beating)
        server.stop()
        return 0
    except BaseException:
        _stop(beating)
        server.stop()
        raise
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        _stop(beating)
        server.stop()
    return 0


def _stop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` unless it is done (faust may have closed the loop already)."""
    if not task.done():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs it
            task.cancel()


class DataDirInUseError(UsageError):
    """Another worker on this host runs with the same ``data_dir``."""


LOCK_FILE = "worker.lock"


def lock_data_dir(s: WorkerSettings) -> IO[str]:
    """Hold ``<data_dir>/worker.lock`` (an exclusive ``flock``, which goes with the
    process however it ends) and write this process's id in it; the open file holds the
    lock until it is closed. :class:`DataDirInUseError` (exit 2) when another worker
    holds it: workers of a group know each other by host and state folder (the marks of
    their window settings, :mod:`~dprobe.streams.group_window`), and a folder holds one
    worker's local state."""
    folder = Path(s.data_dir).expanduser()
    f = open(folder / LOCK_FILE, "a+")  # noqa: SIM115 - returned open: it holds the lock
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise DataDirInUseError(
            f"worker.data_dir {folder} is in use by another worker on this host (pid "
            f"{holder}): give each worker of a host a state folder of its own (--data-dir, "
            f"DPROBE_WORKER_DATA_DIR)"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def _make_data_dir(s: WorkerSettings) -> None:
    """Create the local state folder with its parents (faust creates only the last part);
    one that cannot be created or written is a usage error (exit 2) naming it."""
    check_writable(s.data_dir, "worker.data_dir")


def _serve_metrics(
    s: WorkerSettings, registry: CollectorRegistry, heartbeat: Heartbeat
) -> MetricsServer:
    """/metrics of this worker, serving ``registry`` and how long the event loop has been
    silent (a hung worker still answers scrapes, from the server's thread), and /healthz
    (503 once the loop has been silent for ``health_stale_s``)."""
    export_loop_silence(heartbeat, registry)
    server = MetricsServer(registry, s.metrics_addr, s.metrics_port, health=heartbeat.problem)
    server.serve()  # which logs the scrape URL, with the bound port
    return server


def _measure(w: WorkerApp, registry: CollectorRegistry) -> None:
    """Put the worker's stats on ``registry`` (read at scrape time) with the group's
    consumer lag, measured on its own cadence by a task that lives as long as the app."""
    s = w.settings
    names = w.topics
    lag = ConsumerLag(
        s.kafka,
        s.app_id,
        [names.samples, names.jobs, names.updates, names.planning],
        interval_s=s.lag_interval_s,
    )
    WorkerCollector(w.stats, registry=registry, lag=lag)

    @w.app.task
    async def measure_lag() -> None:
        async with lag:
            await asyncio.Event().wait()  # until the app stops and cancels this task
