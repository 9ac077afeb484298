"""A Kafka broker of a test's own, for the collector tests that stop or pause it.

>>> async with own_broker(tmp_path, request, topic="samples") as broker:  # doctest: +SKIP
...     os.kill(broker_pid(tmp_path), signal.SIGSTOP)  # Kafka hangs; resumed at the end
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe.broker import LocalBroker
from dprobe.config import BrokerSettings


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_for(predicate: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` every 0.2 s; fail the test naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


def broker_pid(tmp_path: Path) -> int:
    """The process id of the broker ``own_broker(tmp_path, ...)`` started."""
    return int((tmp_path / "broker" / "broker.pid").read_text())


@contextlib.asynccontextmanager
async def own_broker(
    tmp_path: Path, request: pytest.FixtureRequest, topic: str | None = None
) -> AsyncIterator[LocalBroker]:
    """A broker in ``tmp_path/broker`` holding ``topic`` (one partition) when given, with
    aiokafka's reconnect noise quiet; resumed if the test paused it, then stopped."""
    quiet = logging.getLogger("aiokafka")
    request.addfinalizer(lambda level=quiet.level: quiet.setLevel(level))
    quiet.setLevel(logging.CRITICAL)
    broker = LocalBroker(
        BrokerSettings(port=free_port(), controller_port=free_port(), state_dir=tmp_path / "broker")
    )
    await asyncio.to_thread(broker.start)
    try:
        if topic is not None:
            admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            finally:
                await admin.close()
        yield broker
    finally:
        with contextlib.suppress(OSError, ValueError):  # stopped already: no pid file
            os.kill(broker_pid(tmp_path), signal.SIGCONT)
        await asyncio.to_thread(broker.stop)
