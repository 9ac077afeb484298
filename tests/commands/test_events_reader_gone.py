"""``dprobe events`` on the real broker: with ``--group``, when the reader goes away
(``| head``, a script that died) the event it could not print is not committed, so the
next run of the group prints it; ``--json`` prints each event as produced."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import msgspec
import pytest
from aiokafka import AIOKafkaProducer

from dprobe.schema import ScalingEvent, encode
from tests.commands.test_events import _event

pytestmark = pytest.mark.integration


def _planned(ev: ScalingEvent, seq: int) -> ScalingEvent:
    return msgspec.structs.replace(ev, plan_seq=seq, plan_size=2)


PLAN_A = [_planned(_event("a1", "vc-a", 8, 16, "plan-a"), 1),
          _planned(_event("a2", "vc-b", 16, 8, "plan-a"), 1)]  # fmt: skip
PLAN_B = [_planned(_event("b1", "vc-a", 16, 24, "plan-b"), 2),
          _planned(_event("b2", "vc-c", 16, 8, "plan-b"), 2)]  # fmt: skip


def _cmd(kafka, prefix: str, *args: str) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "DPROBE_KAFKA_TOPIC_PREFIX": prefix}
    env.pop("DPROBE_CONFIG", None)
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", kafka.bootstrap, "events", *args]
    return cmd, env


def _spawn(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


async def _send(kafka, topic: str, events: list[ScalingEvent]) -> None:
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for ev in events:
            await producer.send_and_wait(topic, encode(ev), key=ev.tenant.encode())


@pytest.mark.timeout(180)
@pytest.mark.parametrize("plans", [False, True])
async def test_an_event_the_reader_never_got_is_printed_by_the_next_run(kafka, plans: bool) -> None:
    prefix = kafka.unique("gone") + "."
    topic = await kafka.create_named(f"{prefix}scaling-events", 1)
    await _send(kafka, topic, PLAN_A)
    group = kafka.unique("group")
    mode = ["--plans"] if plans else []
    cmd, env = _cmd(kafka, prefix, "--group", group, "--from-beginning", "--timeout", "60", *mode)
    proc = _spawn(cmd, env)
    try:
        first = await asyncio.to_thread(proc.stdout.readline)  # type: ignore[union-attr]
        assert "plan=plan-a" in first
        await asyncio.sleep(1.0)  # the rest of plan A written (to the pipe) and committed
        proc.stdout.close()  # type: ignore[union-attr]  # the reader goes away
        await _send(kafka, topic, PLAN_B)  # these cannot be printed any more
        _, err = await asyncio.to_thread(proc.communicate, timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 0, err

    # the reference: every event of plan B was produced after the reader had gone
    cmd, env = _cmd(kafka, prefix, "--group", group, "--timeout", "5", *mode)
    again = await asyncio.to_thread(
        subprocess.run, cmd, capture_output=True, text=True, env=env, timeout=90, check=False
    )
    assert again.returncode == 0, again.stderr
    ids = [line.split(" id=")[1].split()[0] for line in again.stdout.splitlines()]
    assert ids == [e.event_id for e in PLAN_B]


@pytest.mark.parametrize("plans", [False, True])
async def test_json_lines_are_the_events_as_produced_with_fields_this_version_does_not_know(
    kafka, plans: bool
) -> None:
    """A newer worker's event carries fields this version does not know: ``--json`` prints
    them too (the module doc: "the event as produced")."""
    prefix = kafka.unique("json") + "."
    topic = await kafka.create_named(f"{prefix}scaling-events", 1)
    produced = []
    for ev in PLAN_A:
        obj = json.loads(encode(ev))
        obj["priority_class"] = "high"  # a field of a later schema
        produced.append(obj)
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for obj in produced:
            await producer.send_and_wait(topic, json.dumps(obj).encode())
    mode = ["--plans"] if plans else []
    cmd, env = _cmd(kafka, prefix, "--json", "--from-beginning", "--timeout", "3", *mode)
    done = await asyncio.to_thread(
        subprocess.run, cmd, capture_output=True, text=True, env=env, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == produced


@pytest.mark.timeout(180)
async def test_a_reader_slower_than_the_group_session_loses_nothing(kafka) -> None:
    # `dprobe events --group ... | sh` catching up: stdout fills while the reader runs one
    # command after another; the group must keep the member (its heartbeats go on)
    prefix = kafka.unique("slow") + "."
    topic = await kafka.create_named(f"{prefix}scaling-events", 1)
    events = [_event(f"s{i}", f"vc-{i % 7}", 8, 16 + i, f"plan-{i}") for i in range(600)]
    await _send(kafka, topic, events)
    group = kafka.unique("group")
    cmd, env = _cmd(kafka, prefix, "--group", group, "--from-beginning", "--timeout", "3")
    proc = _spawn(cmd, env)
    try:
        await asyncio.sleep(16.0)  # past the group's session timeout (10 s), unread
        out, err = await asyncio.to_thread(proc.communicate, timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    ids = [line.split(" id=")[1].split()[0] for line in out.splitlines()]
    assert ids == [e.event_id for e in events]
    # and all of it was committed: the group's next run prints nothing
    cmd, env = _cmd(kafka, prefix, "--group", group, "--timeout", "3")
    again = await asyncio.to_thread(
        subprocess.run, cmd, capture_output=True, text=True, env=env, timeout=90, check=False
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""


# the group took the partitions back (stdout unread past max_poll_interval_ms): every
# commit of what was printed is refused (the start of the group, with no offsets, is taken)
REFUSING = """
import sys
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import CommitFailedError
from dprobe import cli

async def refused(self, offsets=None):
    if offsets:
        raise CommitFailedError("Commit cannot be completed since the group has\\n  ...")

AIOKafkaConsumer.commit = refused
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.timeout(120)
async def test_a_commit_the_group_refuses_is_one_line_that_says_what_happens_next(kafka) -> None:
    prefix = kafka.unique("refused") + "."
    topic = await kafka.create_named(f"{prefix}scaling-events", 1)
    await _send(kafka, topic, PLAN_A)
    group = kafka.unique("group")
    cmd, env = _cmd(kafka, prefix, "--group", group, "--from-beginning", "--timeout", "3")
    cmd[1:3] = ["-c", REFUSING]  # `python -m dprobe.cli ARGS`, commits refused
    res = await asyncio.to_thread(
        subprocess.run, cmd, capture_output=True, text=True, env=env, timeout=90, check=False
    )
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"dprobe events: group {group} took its partitions back before what was printed could "
        "be committed (stdout not read for over 5 minutes?): the next run of the group prints "
        "those events again"
    )
