"""`dprobe events --group` says where it reads from only once the group has given it its
partitions: while a member that stopped without leaving holds them (a frozen process),
the reader says on stderr what it waits for and, with --timeout, gives up with an error
instead of reading from a position it does not have yet."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from dprobe.commands import events
from dprobe.config import KafkaSettings
from dprobe.errors import DprobeError
from dprobe.schema import Forecast, ModelInfo, ScalingEvent, encode

pytestmark = pytest.mark.integration
SESSION_S = 12  # the frozen member's session: the group drops it after this long

MEMBER = textwrap.dedent(
    """
    import asyncio, sys
    from aiokafka import AIOKafkaConsumer

    async def member():
        bootstrap, topic, group, session_ms = sys.argv[1:5]
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group,
            session_timeout_ms=int(session_ms), heartbeat_interval_ms=1000,
        )
        await consumer.start()
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
        print("joined", flush=True)
        while True:
            await consumer.getmany(timeout_ms=200)

    asyncio.run(member())
    """
)


EVENT = ScalingEvent(
    event_id="e1", plan_id="plan-1", ts=1_764_480_000.0, time="2025-11-30T05:20:00Z",
    tenant="vc-a", action="scale_up", current_quota_gpus=8.0, target_quota_gpus=16.0,
    delta_gpus=8.0, forecast=Forecast(horizon_s=3600, p50=12.0, p90=15.5),
    reason="forecast_above_quota", message="vc-a moves",
    model=ModelInfo(name="dprobe-mmoe", version="1"),
)  # fmt: skip


async def _produce(bootstrap: str, topic: str, event: ScalingEvent) -> None:
    from aiokafka import AIOKafkaProducer

    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        await producer.send_and_wait(topic, encode(event))


@pytest.fixture
def frozen_member(kafka) -> Iterator[tuple[str, str]]:
    """A group whose only member holds the scaling-events topic's partition, then is
    frozen (SIGSTOP); ``(prefix, group)``."""
    import asyncio

    prefix = kafka.unique("evj") + "."
    topic = asyncio.run(kafka.create_named(f"{prefix}scaling-events", 1))
    group = kafka.unique("group")
    argv = [sys.executable, "-c", MEMBER, kafka.bootstrap, topic, group, str(SESSION_S * 1000)]
    member = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert member.stdout is not None and member.stdout.readline().strip() == "joined"
        member.send_signal(signal.SIGSTOP)
        yield prefix, group
    finally:
        member.send_signal(signal.SIGCONT)
        member.kill()
        member.communicate()


def _args(group: str, timeout: float | None, **more: object) -> argparse.Namespace:
    given = {"from_beginning": False, "max_events": None, **more}
    return argparse.Namespace(group=group, timeout=timeout, json=True, plans=False, **given)


def test_a_join_held_up_is_said_and_the_start_line_waits_for_it(
    kafka, frozen_member: tuple[str, str], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    prefix, group = frozen_member
    asyncio.run(_produce(kafka.bootstrap, f"{prefix}scaling-events", EVENT))
    monkeypatch.setattr(events, "JOIN_WAIT_S", 2.0)
    settings = KafkaSettings(bootstrap=kafka.bootstrap, topic_prefix=prefix)
    started = time.monotonic()
    args = _args(group, None, from_beginning=True, max_events=1)
    assert asyncio.run(events._tail(settings, args)) == 0
    took = time.monotonic() - started
    captured = capsys.readouterr()
    assert [json.loads(line)["event_id"] for line in captured.out.splitlines()] == ["e1"]
    err = captured.err.splitlines()
    waiting = [i for i, line in enumerate(err) if "still waiting for group" in line]
    reading = [i for i, line in enumerate(err) if line.startswith("dprobe events: reading")]
    assert len(waiting) == 1 and len(reading) == 1, err
    assert waiting[0] < reading[0]  # said while it waited, before where it reads from
    assert f"group {group}" in err[reading[0]]
    assert took >= SESSION_S - 2, took  # it did wait for the group to drop the member


def test_with_timeout_a_join_that_never_comes_is_an_error(
    kafka, frozen_member: tuple[str, str], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    prefix, group = frozen_member
    monkeypatch.setattr(events, "JOIN_WAIT_S", 1.0)
    settings = KafkaSettings(bootstrap=kafka.bootstrap, topic_prefix=prefix)
    started = time.monotonic()
    with pytest.raises(DprobeError) as refused:
        asyncio.run(events._tail(settings, _args(group, 3.0)))
    assert time.monotonic() - started < SESSION_S - 2  # gave up before the member was dropped
    message = str(refused.value)
    assert f"group {group} gave this reader no partition of {prefix}scaling-events" in message
    assert "(the wait for a join: --timeout 3, at least 1 s)" in message
    assert "dprobe events: reading" not in capsys.readouterr().err
