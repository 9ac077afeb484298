"""An archive asked to stop while Kafka is gone stops within its bound, keeps what it
read, and loses and duplicates nothing once Kafka is back.

The records buffered at the stop are written to files, but their offsets cannot be
committed: the next start deletes those files and reads the records again (the commit
order of :mod:`dprobe.sinks.archive_service`), so every record ends in one file."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe import schema
from dprobe.broker import LocalBroker
from dprobe.config import ArchiveSettings, BrokerSettings, KafkaSettings
from dprobe.demo.processes import free_port
from dprobe.sinks import archive_service
from dprobe.sinks.archive_service import Archiver
from dprobe.traces.archive_reader import read_archive
from tests.sinks.consumer_tasks import TasksSince
from tests.streams.helpers import make_snapshots, produce, snapshot_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]
T0 = 1_700_000_000.0


async def test_a_stop_while_kafka_is_gone_ends_in_time_and_loses_nothing(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
    consumer_tasks: TasksSince,
) -> None:
    quiet = logging.getLogger("aiokafka")
    request.addfinalizer(lambda level=quiet.level: quiet.setLevel(level))
    quiet.setLevel(logging.CRITICAL)  # its reconnect errors while the broker is away
    broker = LocalBroker(
        BrokerSettings(port=free_port(0), controller_port=free_port(0), state_dir=tmp_path / "b")
    )
    await asyncio.to_thread(broker.start)
    request.addfinalizer(broker.stop)
    prefix = f"gone{uuid.uuid4().hex[:6]}."
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}samples", 2, 1)])
    finally:
        await admin.close()
    snaps = make_snapshots(hosts=2, ticks=15, t0=T0)
    await produce(broker.bootstrap, f"{prefix}samples", snapshot_records(snaps))
    settings = ArchiveSettings(
        kafka=KafkaSettings(bootstrap=broker.bootstrap, topic_prefix=prefix),
        out_dir=tmp_path / "archive",
        group_id=f"gone-{uuid.uuid4().hex[:6]}",
        flush_interval_s=3600.0,  # nothing is written before the stop
    )
    archiver = Archiver(settings)
    await archiver.start()
    deadline = time.monotonic() + 60
    while archiver.records < len(snaps) and time.monotonic() < deadline:
        await archiver.poll(timeout_ms=200)
    assert archiver.records == len(snaps) and archiver.writer.records_written == 0

    await asyncio.to_thread(broker.stop)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="dprobe.sinks.archive_service"):
        await asyncio.wait_for(archiver.stop(), 120)  # it hung for minutes
    took = time.monotonic() - started
    bound = archive_service.STOP_COMMIT_S + archive_service.STOP_CLIENT_S
    assert took <= bound + 5, f"stopped after {took:.0f} s"
    assert archiver.writer.records_written == len(snaps)  # written, not committed
    assert any("not committed" in r.getMessage() for r in caplog.records)

    await asyncio.to_thread(broker.start)
    async with Archiver(settings) as again:
        await asyncio.wait_for(again.run(asyncio.Event(), until_end=True), 90)
    assert again.records == len(snaps)  # read again from the last commit (none)
    values = [r.value for r in read_archive(settings.out_dir)]
    assert sorted(values) == sorted(schema.encode(s) for s in snaps)  # once each
