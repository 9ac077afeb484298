"""An archive stopped while Kafka hangs (its process paused: connections open, nothing
answers) gives up its commit after the stop's bound and stops without an asyncio error
in its log: the commit aiokafka still ran in the background fails when the connections
close, and that failure is the warning already logged, not a "Task exception was never
retrieved" traceback."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe.broker import LocalBroker
from dprobe.config import ArchiveSettings, BrokerSettings, KafkaSettings
from dprobe.demo.processes import free_port
from dprobe.sinks.archive_service import Archiver
from tests.sinks.consumer_tasks import TasksSince
from tests.streams.helpers import make_snapshots, produce, snapshot_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]
T0 = 1_700_000_000.0


async def test_a_stop_while_kafka_hangs_logs_no_asyncio_error(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
    consumer_tasks: TasksSince,
) -> None:
    broker = LocalBroker(
        BrokerSettings(port=free_port(0), controller_port=free_port(0), state_dir=tmp_path / "b")
    )
    await asyncio.to_thread(broker.start)
    request.addfinalizer(broker.stop)
    pid = int((tmp_path / "b" / "broker.pid").read_text())
    request.addfinalizer(lambda: os.kill(pid, signal.SIGCONT))
    prefix = f"hung{uuid.uuid4().hex[:6]}."
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}samples", 1, 1)])
    finally:
        await admin.close()
    snaps = make_snapshots(hosts=1, ticks=5, t0=T0)
    await produce(broker.bootstrap, f"{prefix}samples", snapshot_records(snaps))
    settings = ArchiveSettings(
        kafka=KafkaSettings(bootstrap=broker.bootstrap, topic_prefix=prefix),
        out_dir=tmp_path / "archive",
        group_id=f"hung-{uuid.uuid4().hex[:6]}",
        flush_interval_s=3600.0,  # the offsets are committed at the stop, not before
    )
    archiver = Archiver(settings)
    await archiver.start()
    deadline = time.monotonic() + 60
    while archiver.records < len(snaps) and time.monotonic() < deadline:
        await archiver.poll(timeout_ms=200)
    assert archiver.records == len(snaps)

    os.kill(pid, signal.SIGSTOP)
    with caplog.at_level(logging.WARNING):
        await asyncio.wait_for(archiver.stop(), 60)
        await asyncio.sleep(0.5)  # the background commit ends when its connection closes
        gc.collect()  # asyncio logs an unretrieved task exception when the task goes
    assert any("not committed" in r.getMessage() for r in caplog.records)
    errors = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert errors == [], errors
    # nothing of the consumer goes on (its fetcher retried the broker, and logged each
    # failure, for as long as the process ran)
    left = await consumer_tasks.still_running_after(2.0)
    assert not left, sorted(t.get_coro().__qualname__ for t in left)  # type: ignore[union-attr]
