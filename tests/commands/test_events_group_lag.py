"""`dprobe events --group` that has printed every plan leaves its group no lag: the
worker sends each plan in a transaction, whose commit marker takes an offset after the
plan's last event, and the group commits past it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from dprobe.schema import encode
from tests.commands.test_events_commit import _event

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("plans", [False, True])
async def test_a_group_that_printed_everything_has_no_lag(kafka, plans: bool) -> None:
    prefix = kafka.unique("ev") + "."
    topic = await kafka.create_named(f"{prefix}scaling-events", 1)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.bootstrap, transactional_id=kafka.unique("planner")
    )
    async with producer:
        for seq, (donor, receiver) in enumerate([("vc-a", "vc-b"), ("vc-b", "vc-a")], start=1):
            async with producer.transaction():
                for e in (
                    _event(f"d{seq}", seq, donor, 16, 8),
                    _event(f"r{seq}", seq, receiver, 8, 16),
                ):
                    await producer.send(topic, encode(e), key=e.tenant.encode())
    group = kafka.unique("group")
    env = {**os.environ, "DPROBE_KAFKA_TOPIC_PREFIX": prefix}
    env.pop("DPROBE_CONFIG", None)
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", kafka.bootstrap, "events",
           "--group", group, "--from-beginning", "--timeout", "3"]  # fmt: skip
    res = await asyncio.to_thread(
        subprocess.run, [*cmd, *(["--plans"] * plans)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 4
    tp = TopicPartition(topic, 0)
    async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group) as reader:
        end = (await reader.end_offsets([tp]))[tp]
        assert end == 6  # 4 events and a commit marker per plan
        assert await reader.committed(tp) == end
