"""A one-off export (``--until-end``) in the group of an archive that is running (the
default group of the service) gets only some of the partitions: it says which it did not
read, instead of ending as if the export were whole."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe.config import ArchiveSettings, KafkaSettings
from dprobe.sinks.archive_service import Archiver
from tests.streams.helpers import make_snapshots, produce, snapshot_records

pytestmark = [pytest.mark.integration]


async def test_an_export_in_a_group_with_another_member_names_what_it_did_not_read(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"au{uuid.uuid4().hex[:8]}."
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}samples", 4, 1)])
    finally:
        await admin.close()
    snaps = make_snapshots(hosts=8, ticks=5, t0=1_700_000_000.0)
    await produce(kafka_bootstrap, f"{prefix}samples", snapshot_records(snaps))
    group = f"archive-{uuid.uuid4().hex[:8]}"

    def settings(out: str) -> ArchiveSettings:
        return ArchiveSettings(
            kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=prefix),
            out_dir=tmp_path / out,
            group_id=group,
        )

    stop_service = asyncio.Event()
    async with Archiver(settings("service")) as service:
        assert service.consumer is not None
        while not service.consumer.assignment():  # it has joined the group
            await service.poll(timeout_ms=100)
        running = asyncio.create_task(service.run(stop_service))
        with caplog.at_level("WARNING", logger="dprobe.sinks.archive_service"):
            async with Archiver(settings("export")) as export:
                await asyncio.wait_for(export.run(asyncio.Event(), until_end=True), 60)
                assert export.consumer is not None
                mine = {tp.partition for tp in export.consumer.assignment()}
        stop_service.set()
        await running
    assert mine and len(mine) < 4  # the group split the partitions
    others = sorted(set(range(4)) - mine)
    said = [r.getMessage() for r in caplog.records if "--until-end" in r.getMessage()]
    assert len(said) == 1, caplog.text
    named = ", ".join(map(str, others))
    assert f"{prefix}samples partition(s) {named}" in said[0] and group in said[0]
