"""Run the faust worker of :mod:`dprobe.streams.app` in the foreground until SIGTERM/SIGINT.

Example:
    >>> from dprobe.config import WorkerSettings
    >>> run_worker(WorkerSettings())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging

import faust
from prometheus_client import CollectorRegistry

from dprobe.config import WorkerSettings
from dprobe.sinks.consumer_lag import ConsumerLag
from dprobe.sinks.metrics_server import MetricsServer
from dprobe.sinks.worker_metrics import WorkerCollector
from dprobe.streams.app import WorkerApp, build_app
from dprobe.streams.provision import ensure_topics
from dprobe.streams.topics import TopicNames

log = logging.getLogger(__name__)


def run_worker(s: WorkerSettings, *, loglevel: str = "INFO") -> int:
    """Create missing topics, build the app and run it; returns the exit code."""
    loop = asyncio.get_event_loop()
    partitions = loop.run_until_complete(ensure_topics(s))
    names = TopicNames.from_settings(s)
    worker_app = build_app(s, samples_partitions=partitions[names.samples])
    server = _serve_metrics(worker_app)
    worker = faust.Worker(
        worker_app.app,
        loop=loop,
        loglevel=loglevel,
        quiet=True,
        override_logging=False,
        redirect_stdouts=False,
    )
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        server.stop()
    return 0


def _serve_metrics(w: WorkerApp) -> MetricsServer:
    """/metrics of this worker: its stats at scrape time plus the group's consumer lag,
    measured on its own cadence by a task that lives as long as the app."""
    s = w.settings
    names = w.topics
    lag = ConsumerLag(
        s.kafka,
        s.app_id,
        [names.samples, names.jobs, names.updates, names.planning],
        interval_s=s.lag_interval_s,
    )
    registry = CollectorRegistry()
    WorkerCollector(w.stats, registry=registry, lag=lag)

    @w.app.task
    async def measure_lag() -> None:
        async with lag:
            await asyncio.Event().wait()  # until the app stops and cancels this task

    server = MetricsServer(registry, s.metrics_addr, s.metrics_port)
    port = server.start()
    log.info("serving /metrics on http://%s:%s/metrics", s.metrics_addr, port)
    return server
