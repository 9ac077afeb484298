"""Run the faust worker of :mod:`dprobe.streams.app` in the foreground until SIGTERM/SIGINT.

Example:
    >>> from dprobe.config import WorkerSettings
    >>> run_worker(WorkerSettings())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging

import faust
from dprobe.streams.app import build_app
from dprobe.streams.provision import ensure_topics
from dprobe.streams.topics import TopicNames

from dprobe.config import WorkerSettings

log = logging.getLogger(__name__)


def run_worker(s: WorkerSettings, *, loglevel: str = "INFO") -> int:
    """Create missing topics, build the app and run it; returns the exit code."""
    loop = asyncio.get_event_loop()
    partitions = loop.run_until_complete(ensure_topics(s))
    names = TopicNames.from_settings(s)
    worker_app = build_app(s, samples_partitions=partitions[names.samples])
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
    return 0
