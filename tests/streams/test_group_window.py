"""A worker does not join running workers of its app id that window with another length
(they would write overlapping windows and drop each other's data as late); a group with
no running member may change its length, and `dprobe topics create` is not checked."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import socket
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from dprobe.config import KafkaSettings, WorkerSettings
from dprobe.schema import LevelCounts, TenantWindow
from dprobe.streams import codec
from dprobe.streams.group_window import (
    LOOK_BACK,
    REMARK_S,
    START_GRACE_S,
    WindowLengthMismatchError,
    announce_window,
    check_group_window,
    newest_window_length,
    window_shape,
    worker_identity,
)
from dprobe.streams.provision import PartitionsChangedError, changelog_topics, ensure_topics
from dprobe.streams.topics import TopicNames
from tests.conftest import KafkaHelper
from tests.streams.helpers import unstarted_worker_app

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


async def test_workers_starting_an_empty_group_at_once_keep_the_first_length(
    kafka: KafkaHelper, tmp_path: Path
) -> None:
    """Two workers with other lengths start a group that has no member at the same
    moment: both find nobody running and both leave a mark; the one whose mark came
    second exits 2, and the group's length is the first one's."""
    s60 = await _group_running_10s_windows(kafka, tmp_path)  # old windows 10 s
    s30 = dataclasses.replace(s60, window_s=30.0)
    planning = TopicNames.from_settings(s60).planning
    results = await asyncio.gather(
        ensure_topics(s60, attempts=3, joining=True),
        ensure_topics(s30, attempts=3, joining=True),
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 1 and isinstance(refused[0], WindowLengthMismatchError), results
    kept = s30 if isinstance(results[0], BaseException) else s60
    lost = s60 if kept is s30 else s30
    message = str(refused[0])
    assert f"with {kept.window_s:g}-s windows started the group just before this one" in message
    assert f"by their clocks), which makes {lost.window_s:g}-s windows" in message
    assert f"Start it with --window {kept.window_s:g}," in message
    # a worker that joins next is checked against the first mark, not the one that lost
    assert await newest_window_length(s60, planning) == kept.window_s
    member = await _member(kafka, s60.app_id, planning)
    try:
        await _check(kept)
        with pytest.raises(WindowLengthMismatchError):
            await _check(lost)
    finally:
        await member.stop()
    await announce_window(kept, planning)  # a third at once, with the first's length: joins


async def test_a_mark_older_than_the_start_grace_does_not_hold(
    kafka: KafkaHelper, tmp_path: Path
) -> None:
    """A worker that started the group and stopped before closing a window, longer ago
    than START_GRACE_S: a worker with another length starts the group anew."""
    s = await _group_running_10s_windows(kafka, tmp_path)
    planning = TopicNames.from_settings(s).planning
    stale = codec.WorkerStarted(window_s=20.0, at=time.time() - START_GRACE_S - 5)
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(planning, codec.encode_started(stale), key=b"plan")
    assert await newest_window_length(s, planning) == 20.0
    await announce_window(s, planning)  # 60 s: not refused
    assert await newest_window_length(s, planning) == 60.0
    # the same within the grace is refused
    recent = codec.WorkerStarted(window_s=20.0, at=time.time())
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(planning, codec.encode_started(recent), key=b"plan")
    assert await newest_window_length(s, planning) == 60.0  # the 20-s mark lost


async def test_a_joining_worker_warns_of_other_window_settings_and_marks_its_own(
    kafka: KafkaHelper, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every worker marks its window settings; one that joins running workers warns of
    each that differs from another worker's newest mark (never its own earlier one).
    Only the length refuses a start."""
    a = dataclasses.replace(await _group_running_10s_windows(kafka, tmp_path), window_s=10.0)
    planning = TopicNames.from_settings(a).planning
    b = dataclasses.replace(a, data_dir=tmp_path / "b")  # another worker: its own state folder
    b_other = dataclasses.replace(b, grace_s=30.0, flow_edges_s=(60.0, 600.0))

    async def join(settings: WorkerSettings) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dprobe.streams.group_window"):
            await ensure_topics(settings, attempts=3, joining=True)
        return [r.getMessage() for r in caplog.records if "other settings" in r.getMessage()]

    assert await join(a) == []  # the first starts the group: nothing to compare with
    member = await _member(kafka, a.app_id, planning)
    try:
        (warning,) = await join(b_other)
        who = f"the worker of app id {a.app_id!r} that marked its settings last before it"
        assert who in warning
        assert f"{socket.gethostname()}:{tmp_path}, " in warning  # who: a
        assert "grace_s 30 here, 10 there; flow_edges_s 60,600 here, " in warning
        assert "60,240,960,3840,15360,61440,245760 there" in warning
        assert "level_weights" not in warning  # the same on both
        assert len(await join(b_other)) == 1  # restarted as it was: still unlike a
        # b restarted with a's settings: compared with a, not with its own last mark
        assert await join(b) == []
        # a third, c, is compared with the newest mark of another: b's
        (third,) = await join(dataclasses.replace(b_other, data_dir=tmp_path / "c"))
        assert "grace_s 30 here, 10 there" in third and f"{tmp_path / 'b'}, " in third
        # a mark of an older worker holds no settings: nothing to compare
        old = b"S" + json.dumps([10.0, time.time()]).encode()
        async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
            await producer.send_and_wait(planning, old, key=b"plan")
        assert await join(b_other) == []
    finally:
        await member.stop()
    assert await newest_window_length(a, planning) == 10.0  # joined marks set no length


async def test_settings_are_compared_with_a_mark_older_than_the_look_back(
    kafka: KafkaHelper, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A group that has run for a while has forwarded many windows and progress records
    to the planning topic since its workers marked their settings: a worker that joins
    with other settings then (the first of a rolling change of the config file) still
    finds the running worker's mark and warns."""
    a = dataclasses.replace(await _group_running_10s_windows(kafka, tmp_path), window_s=10.0)
    planning = TopicNames.from_settings(a).planning
    b_other = dataclasses.replace(a, data_dir=tmp_path / "b", grace_s=30.0)
    await ensure_topics(a, attempts=3, joining=True)  # a starts the group and marks
    member = await _member(kafka, a.app_id, planning)
    try:
        async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=20) as producer:
            sends = [  # the running group's windows and progress since a's mark
                await producer.send(
                    planning, codec.encode_plan_window(_window("vc-a", 1020.0 + 10 * i, 10.0))
                )
                for i in range(LOOK_BACK + 100)
            ]
            await asyncio.gather(*sends)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dprobe.streams.group_window"):
            await ensure_topics(b_other, attempts=3, joining=True)
        warnings = [r.getMessage() for r in caplog.records if "other settings" in r.getMessage()]
        (warning,) = warnings
        assert f"{socket.gethostname()}:{tmp_path}, " in warning  # a, the running worker
        assert "grace_s 30 here, 10 there" in warning
    finally:
        await member.stop()


async def test_a_running_worker_marks_its_settings_again_every_remark_s(
    kafka: KafkaHelper, tmp_path: Path
) -> None:
    """A worker's mark at its start falls behind the windows its group forwards; every
    REMARK_S it leaves a joined mark again (its settings, no length), so a worker that
    joins a group that has run for days compares with the settings running now."""
    s = dataclasses.replace(
        await _group_running_10s_windows(kafka, tmp_path), window_s=10.0, grace_s=25.0
    )
    planning = TopicNames.from_settings(s).planning
    with unstarted_worker_app(s) as built:
        (timer,) = [
            t for t in built.app._app_tasks if inspect.unwrap(t).__name__ == "remark_settings"
        ]
        around = timer.__wrapped__  # type: ignore[attr-defined]
        assert inspect.getclosurevars(around).nonlocals["interval_s"] == REMARK_S
        await inspect.unwrap(timer)()
    async with AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest"
    ) as consumer:
        tp = TopicPartition(planning, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        consumer.seek(tp, end - 1)
        (record,) = (await consumer.getmany(tp, timeout_ms=5000))[tp]
    mark = codec.decode_planning(record.value or b"")
    assert isinstance(mark, codec.WorkerStarted)
    assert mark.joined and mark.worker == worker_identity(s)
    assert mark.shape == window_shape(s) and mark.shape["grace_s"] == 25.0


async def test_a_worker_refused_for_its_partitions_does_not_warn_of_its_settings(
    kafka: KafkaHelper, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker started with another ``partitions`` than its group's topic exits 2 with
    that reason alone: no warning that it would window with other settings, since it
    never windows."""
    a = dataclasses.replace(await _group_running_10s_windows(kafka, tmp_path), window_s=10.0)
    planning = TopicNames.from_settings(a).planning
    await ensure_topics(a, attempts=3, joining=True)
    member = await _member(kafka, a.app_id, planning)
    try:
        b = dataclasses.replace(a, data_dir=tmp_path / "b", grace_s=30.0, partitions=2)
        caplog.clear()
        with (
            caplog.at_level(logging.WARNING, logger="dprobe.streams.group_window"),
            pytest.raises(PartitionsChangedError, match="--partitions 1"),
        ):
            await ensure_topics(b, attempts=3, joining=True)
        assert [r.getMessage() for r in caplog.records if "other settings" in r.getMessage()] == []
    finally:
        await member.stop()
