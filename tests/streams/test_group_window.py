"""A worker does not join running workers of its app id that window with another length
(they would write overlapping windows and drop each other's data as late); a group with
no running member may change its length, and `dprobe topics create` is not checked."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from dprobe.config import KafkaSettings, WorkerSettings
from dprobe.schema import LevelCounts, TenantWindow
from dprobe.streams import codec
from dprobe.streams.group_window import WindowLengthMismatchError, check_group_window
from dprobe.streams.provision import changelog_topics, ensure_topics
from dprobe.streams.topics import TopicNames
from tests.conftest import KafkaHelper

pytestmark = pytest.mark.integration


def _window(tenant: str, start: float, length: float) -> TenantWindow:
    return TenantWindow(
        tenant=tenant,
        window_start=start,
        window_end=start + length,
        hosts=1,
        gpus_busy=1.0,
        instances=1.0,
        util_sum=50.0,
        level_counts=LevelCounts(L3=1),
        effective_demand_gpus=0.7,
        pending_gpus=0.0,
        running_gpus=1.0,
    )


async def _group_running_10s_windows(kafka: KafkaHelper, tmp_path: Path) -> WorkerSettings:
    """Settings of a 60-s worker, whose group's planning topic ends with a 10-s window
    (then a progress mark and a record this check cannot read)."""
    prefix = kafka.unique("gw") + "."
    s = WorkerSettings(
        app_id=prefix.rstrip(".") + "-w",
        window_s=60.0,
        partitions=1,
        data_dir=tmp_path,
        kafka=KafkaSettings(bootstrap=kafka.bootstrap, topic_prefix=prefix),
    )
    names = TopicNames.from_settings(s)
    kafka.created += [*names.external(), names.updates, *changelog_topics(s, 1)]
    await kafka.create_named(names.planning)
    records = [
        codec.encode_plan_window(_window("vc-a", 1000.0, 10.0)),
        codec.encode_plan_window(_window("vc-b", 1010.0, 10.0)),
        codec.encode_progress(codec.WindowProgress(partition=0, upto=1020.0)),
        b"?garbage",
    ]
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for value in records:
            await producer.send_and_wait(names.planning, value, key=b"plan")
    return s


async def _member(kafka: KafkaHelper, group: str, topic: str) -> AIOKafkaConsumer:
    """A running member of consumer group ``group``."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka.bootstrap, group_id=group)
    await consumer.start()
    await consumer.getmany(timeout_ms=3000)  # joins the group
    assert consumer.assignment()
    return consumer


async def _check(s: WorkerSettings) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka.bootstrap)
    await admin.start()
    try:
        await check_group_window(admin, s, TopicNames.from_settings(s).planning)
    finally:
        await admin.close()


async def test_a_worker_with_another_window_length_does_not_join_running_workers(
    kafka: KafkaHelper, tmp_path: Path
) -> None:
    s = await _group_running_10s_windows(kafka, tmp_path)
    planning = TopicNames.from_settings(s).planning
    await _check(s)  # no worker of the group runs: the length may change
    member = await _member(kafka, s.app_id, planning)
    try:
        with pytest.raises(WindowLengthMismatchError) as refused:
            await _check(s)
        message = str(refused.value)
        assert f"the 1 running worker(s) of app id {s.app_id!r} make 10-s windows" in message
        assert f"(the newest length on {planning}), this one 60-s windows" in message
        assert "Start it with --window 10, or stop every worker of the group" in message
        await _check(dataclasses.replace(s, window_s=10.0))  # the same length joins
        # the worker's start runs the check; `dprobe topics create` does not
        with pytest.raises(WindowLengthMismatchError):
            await ensure_topics(s, attempts=3, joining=True)
        await ensure_topics(s, attempts=3)
    finally:
        await member.stop()
    await _check(s)  # every worker stopped: a new length is how the group changes it


async def test_a_group_without_windows_yet_is_not_checked(
    kafka: KafkaHelper, tmp_path: Path
) -> None:
    prefix = kafka.unique("gw0") + "."
    s = WorkerSettings(
        app_id=prefix.rstrip(".") + "-w",
        data_dir=tmp_path,
        kafka=KafkaSettings(bootstrap=kafka.bootstrap, topic_prefix=prefix),
    )
    planning = await kafka.create_named(TopicNames.from_settings(s).planning)
    member = await _member(kafka, s.app_id, planning)
    try:
        await _check(s)  # an empty planning topic: nothing to compare with
    finally:
        await member.stop()


async def test_workers_restarted_with_a_new_length_are_checked_against_the_first_of_them(
    kafka: KafkaHelper, tmp_path: Path
) -> None:
    """Every worker stopped, then started again with a new length: the first (no member
    runs, nothing is checked) leaves its mark, so the next ones are checked against the
    new length, not against the old windows still newest on the planning topic."""
    s = await _group_running_10s_windows(kafka, tmp_path)  # old windows 10 s, now 60 s
    planning = TopicNames.from_settings(s).planning
    await ensure_topics(s, attempts=3, joining=True)  # the first worker of the new length
    member = await _member(kafka, s.app_id, planning)  # ... runs
    try:
        await _check(s)  # the second, also 60 s, joins
        with pytest.raises(WindowLengthMismatchError) as refused:
            await _check(dataclasses.replace(s, window_s=10.0))  # one left on the old length
        assert "make 60-s windows" in str(refused.value)
        assert "Start it with --window 60," in str(refused.value)
    finally:
        await member.stop()
