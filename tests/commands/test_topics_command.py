"""``dprobe topics`` on the real broker: every topic with the configured partitions (the
scaling events with one), and a warning naming the fix for a topic created too small."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe.cli import main

pytestmark = pytest.mark.integration


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


def test_topics_create_makes_every_topic_and_warns_about_a_small_one(
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    # a collector started first made Kafka auto-create the samples topic with one partition
    asyncio.run(_create(kafka_bootstrap, f"{prefix}samples", 1))
    base = ["--bootstrap", kafka_bootstrap, "topics"]
    assert main([*base, "list"]) == 0
    listed = capsys.readouterr()
    assert f"{prefix}jobs\tmissing" in listed.out and "run `dprobe topics create`" in listed.err
    with caplog.at_level(logging.WARNING, logger="dprobe.streams.provision"):
        assert main([*base, "create", "--partitions", "3", "--app-id", f"{prefix}app"]) == 0
    out = capsys.readouterr().out
    lines = dict(line.split("\t") for line in out.strip().splitlines())
    assert lines[f"{prefix}jobs"] == "3 partition(s)"
    assert lines[f"{prefix}features"] == "3 partition(s)"
    assert lines[f"{prefix}scaling-events"] == "1 partition(s)"
    assert lines[f"{prefix}samples"] == "1 partition(s)"  # left as it was, with a warning
    # the worker's internal topics too, its changelogs listed with their partitions (not
    # "missing" because the broker's metadata did not hold them yet): the hosts table's
    # as the samples topic, the windows table's as worker.partitions, planning's one
    app = f"{prefix}app"
    assert lines[f"{app}-tenant-updates"] == "3 partition(s)"
    assert lines[f"{app}-hosts-changelog"] == "1 partition(s)"
    assert lines[f"{app}-windows-changelog"] == "3 partition(s)"
    assert lines[f"{app}-planning-changelog"] == "1 partition(s)"
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert f"topic {prefix}samples has 1 partition(s)" in warning
    assert "fewer than worker.partitions=3" in warning
