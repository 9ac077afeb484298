"""A worker does not join the consumer group of workers that read other topics: a replay
worker started without its own ``--app-id`` would otherwise share the live workers' group,
internal topics and planning state."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from dprobe.config import KafkaSettings, WorkerSettings
from dprobe.streams.provision import (
    AppIdInUseError,
    PartitionsChangedError,
    changelog_topics,
    ensure_topics,
)
from dprobe.streams.topics import TopicNames
from tests.conftest import KafkaHelper


async def _live_group(kafka: KafkaHelper, prefix: str, group: str) -> None:
    """A group that read and committed one record of ``<prefix>samples``."""
    topic = await kafka.create_named(f"{prefix}samples")
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    async with producer:
        await producer.send_and_wait(topic, b"snapshot", key=b"h1")
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    async with consumer:
        await consumer.getone()
        await consumer.commit()


def _settings(kafka: KafkaHelper, prefix: str, app_id: str, tmp_path: Path) -> WorkerSettings:
    s = WorkerSettings(
        app_id=app_id,
        partitions=1,
        data_dir=tmp_path,
        kafka=KafkaSettings(bootstrap=kafka.bootstrap, topic_prefix=prefix),
    )
    names = TopicNames.from_settings(s)
    kafka.created += [*names.external(), names.updates, names.planning, *changelog_topics(s, 1)]
    return s


async def test_a_worker_on_other_topics_refuses_a_running_pipelines_app_id(
    kafka: KafkaHelper, tmp_path: Path
) -> None:
    live, replay = kafka.unique("live") + ".", kafka.unique("replay") + "."
    group = kafka.unique("workers")
    await _live_group(kafka, live, group)
    with pytest.raises(AppIdInUseError) as refused:
        await ensure_topics(_settings(kafka, replay, group, tmp_path))
    message = str(refused.value)
    assert f"{live}samples" in message and f"{replay}samples" in message
    assert "--app-id" in message
    # the live pipeline's own workers, and a worker with an app id of its own, start
    assert (await ensure_topics(_settings(kafka, live, group, tmp_path)))[f"{live}samples"] == 1
    own = await ensure_topics(_settings(kafka, replay, kafka.unique("replay-workers"), tmp_path))
    assert own[f"{replay}samples"] == 1


async def test_dprobe_worker_exits_2_with_the_reason(kafka: KafkaHelper, tmp_path: Path) -> None:
    live, replay = kafka.unique("live") + ".", kafka.unique("replay") + "."
    group = kafka.unique("workers")
    await _live_group(kafka, live, group)
    _settings(kafka, replay, group, tmp_path)  # topics it may create are cleaned up
    env = {**os.environ, "DPROBE_KAFKA_TOPIC_PREFIX": replay, "DPROBE_WORKER_METRICS_PORT": "0"}
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", kafka.bootstrap, "worker"]
    cmd += ["--app-id", group, "--data-dir", str(tmp_path), "--partitions", "1"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        if proc.returncode is None:  # it joined the group after all: stop it
            proc.kill()
            await proc.wait()
    stderr = err.decode()
    assert proc.returncode == 2, stderr[-2000:]
    assert f"{live}samples" in stderr and "--app-id" in stderr


async def test_a_worker_refuses_a_partition_count_its_window_topics_do_not_have(
    kafka: KafkaHelper, tmp_path: Path
) -> None:
    """The window stage's layout is fixed once its topic exists: a worker started with
    another ``worker.partitions`` (more, to scale out; fewer by mistake) says so and how
    to start instead of failing every batch or leaving tenants without windows."""
    prefix, app_id = kafka.unique("layout") + ".", kafka.unique("layout-workers")
    first = _settings(kafka, prefix, app_id, tmp_path)
    assert (await ensure_topics(first))[f"{prefix}samples"] == 1
    for partitions in (3, 2):
        changed = dataclasses.replace(first, partitions=partitions)
        with pytest.raises(PartitionsChangedError) as refused:
            await ensure_topics(changed)
        message = str(refused.value)
        assert f"{app_id}-tenant-updates has 1 partition(s)" in message
        assert f"worker.partitions is {partitions}" in message and "--partitions 1" in message
    assert (await ensure_topics(first))[f"{prefix}samples"] == 1  # the same layout starts
