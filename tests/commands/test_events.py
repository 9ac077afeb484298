"""`dprobe events` on the real broker: readable lines or JSON Lines, duplicates dropped,
garbage skipped with a warning, stop options, consumer-group resume, exit codes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from aiokafka import AIOKafkaProducer

from dprobe.schema import Forecast, ModelInfo, ScalingEvent, encode

pytestmark = pytest.mark.integration


def _event(eid: str, tenant: str, current: float, target: float, plan: str) -> ScalingEvent:
    delta = target - current
    return ScalingEvent(
        event_id=eid,
        plan_id=plan,
        ts=1_764_480_000.0,  # 2025-11-30T05:20:00Z
        time="2025-11-30T05:20:00Z",
        tenant=tenant,
        action="scale_up" if delta > 0 else "scale_down",
        current_quota_gpus=current,
        target_quota_gpus=target,
        delta_gpus=delta,
        forecast=Forecast(horizon_s=3600, p50=12.0, p90=15.5),
        reason="forecast_above_quota" if delta > 0 else "idle_capacity",
        message=f"{tenant} moves",
        model=ModelInfo(name="dprobe-mmoe", version="1"),
    )


EVENTS = [
    _event("e1", "vc-a", 8, 16, "plan-1"),
    _event("e2", "vc-b", 24, 16, "plan-1"),
    _event("e3", "vc-c", 8, 12, "plan-2"),
]


async def _topic_with_events(kafka, records: list[tuple[int, bytes]]) -> str:
    """A fresh ``<prefix>scaling-events`` topic (2 partitions) holding ``records``."""
    prefix = kafka.unique("ev") + "."
    topic = await kafka.create_named(f"{prefix}scaling-events", 2)
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for partition, value in records:
            await producer.send_and_wait(topic, value, partition=partition)
    return prefix


def _run(kafka, prefix: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "DPROBE_KAFKA_TOPIC_PREFIX": prefix}
    env.pop("DPROBE_CONFIG", None)
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", kafka.bootstrap, "events", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def _records_with_duplicates_and_garbage() -> list[tuple[int, bytes]]:
    e1, e2, e3 = (encode(e) for e in EVENTS)
    # e1 again on the other partition (a re-produced event), e2 redelivered, one garbage record
    return [(0, e1), (1, e2), (0, b"{not json"), (1, e1), (0, e2), (0, e3)]


async def test_readable_lines_once_per_event_and_garbage_skipped(kafka) -> None:
    prefix = await _topic_with_events(kafka, _records_with_duplicates_and_garbage())
    res = _run(kafka, prefix, "--from-beginning", "--timeout", "3")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 3
    by_tenant = {line.split()[1]: line for line in lines}
    assert set(by_tenant) == {"vc-a", "vc-b", "vc-c"}
    assert by_tenant["vc-a"] == (
        "2025-11-30T05:20:00Z vc-a scale_up 8 -> 16 GPUs (+8) forecast 1h p50 12.0 p90 15.5"
        ' reason=forecast_above_quota plan=plan-1 id=e1 "vc-a moves"'
    )
    assert "scale_down 24 -> 16 GPUs (-8)" in by_tenant["vc-b"]
    assert "skipping" in res.stderr and "@1" in res.stderr  # partition 0, offset 1
    assert "3 events, 2 duplicates dropped, 1 invalid record skipped" in res.stderr


async def test_json_lines_and_max_events_stops_early(kafka) -> None:
    prefix = await _topic_with_events(kafka, _records_with_duplicates_and_garbage())
    t0 = time.monotonic()
    res = _run(kafka, prefix, "--json", "--from-beginning", "--timeout", "120", "--max-events", "3")
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 60  # stopped at 3 events, not at the 120 s timeout
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert sorted(d["event_id"] for d in docs) == ["e1", "e2", "e3"]
    e1 = next(d for d in docs if d["event_id"] == "e1")
    assert e1["target_quota_gpus"] == 16.0 and e1["forecast"]["p90"] == 15.5
    assert e1["plan_id"] == "plan-1" and e1["v"] == 1


async def test_a_group_resumes_where_it_stopped(kafka) -> None:
    e1, e2, e3 = (encode(e) for e in EVENTS)
    prefix = await _topic_with_events(kafka, [(0, e1), (0, e2), (0, e3)])
    group = kafka.unique("group")
    first = _run(kafka, prefix, "--group", group, "--from-beginning", "--max-events", "2")
    assert first.returncode == 0, first.stderr
    assert [line.split()[1] for line in first.stdout.splitlines()] == ["vc-a", "vc-b"]
    second = _run(kafka, prefix, "--group", group, "--from-beginning", "--timeout", "3")
    assert second.returncode == 0, second.stderr
    assert [line.split()[1] for line in second.stdout.splitlines()] == ["vc-c"]


async def test_a_new_group_that_printed_nothing_resumes_where_it_started(kafka) -> None:
    """Its first run starts at new events; what comes after it stops is printed by the
    next run, as kafka-console-consumer's group does, not skipped for newer events."""
    e1, _, e3 = (encode(e) for e in EVENTS)
    prefix = await _topic_with_events(kafka, [(0, e1)])
    group = kafka.unique("group")
    first = _run(kafka, prefix, "--group", group, "--timeout", "2")
    assert first.returncode == 0, first.stderr
    assert first.stdout == ""  # e1 came before it: not a new event
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(f"{prefix}scaling-events", e3, partition=1)
    second = _run(kafka, prefix, "--group", group, "--timeout", "3")
    assert second.returncode == 0, second.stderr
    assert [line.split()[1] for line in second.stdout.splitlines()] == ["vc-c"]


def test_bad_stop_options_are_usage_errors() -> None:
    from dprobe.cli import main

    assert main(["events", "--max-events", "0"]) == 2
    assert main(["events", "--timeout", "-1"]) == 2


@pytest.mark.parametrize("argv", [["events"], ["topics", "list"], ["cluster", "show"]])
def test_an_unreachable_broker_exits_2_with_a_reason(argv: list[str]) -> None:
    # like replay and archive: one line naming the address, exit 2, and nothing else (the
    # Kafka client's own log lines of the failed start included)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", f"127.0.0.1:{port}", *argv]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"dprobe {argv[0]}: cannot reach Kafka at 127.0.0.1:{port}: ")
    assert res.stdout == ""


def test_ctrl_c_while_connecting_leaves_no_unclosed_client_behind() -> None:
    import signal

    # a "broker" that takes the connection and never answers: the tail waits in its start
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", f"127.0.0.1:{port}", "events"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            silent.settimeout(60)
            conn, _ = silent.accept()
            time.sleep(0.5)  # its bootstrap request is on the way
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            conn.close()
        finally:
            proc.kill()
    assert proc.returncode == 130, err
    assert (out, err) == ("", "")  # asyncio said "Unclosed AIOKafkaConsumer" at exit


def test_nothing_at_the_default_address_suggests_starting_the_local_broker() -> None:
    from dprobe.config import KafkaSettings
    from dprobe.kafka_auth import AuthWatch, connect_error

    error = str(connect_error(KafkaSettings(), OSError("refused"), AuthWatch()))
    assert "`dprobe broker start` starts a local one" in error
    other = KafkaSettings(bootstrap="kafka-1:9092")
    assert "broker start" not in str(connect_error(other, OSError("refused"), AuthWatch()))


def _spawn(kafka, prefix: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "DPROBE_KAFKA_TOPIC_PREFIX": prefix}
    env.pop("DPROBE_CONFIG", None)
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", kafka.bootstrap, "events", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.timeout(120)
async def test_without_from_beginning_only_events_after_the_start_are_printed(kafka) -> None:
    import asyncio

    e1, _, e3 = (encode(e) for e in EVENTS)
    prefix = await _topic_with_events(kafka, [(0, e1)])
    proc = _spawn(kafka, prefix, "--max-events", "1", "--timeout", "60")
    try:
        ready = ""
        while "dprobe events: reading" not in ready:  # (aiokafka logs to stderr too)
            ready = await asyncio.to_thread(proc.stderr.readline)
            assert ready, "the command ended before it started reading"
        assert "2 partitions" in ready and "new events" in ready
        async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
            await producer.send_and_wait(f"{prefix}scaling-events", e3, partition=1)
        out, err = await asyncio.to_thread(proc.communicate, timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert [line.split()[1] for line in out.splitlines()] == ["vc-c"]


@pytest.mark.timeout(120)
async def test_a_reader_that_goes_away_ends_the_tail_quietly(kafka) -> None:
    import asyncio

    many = [
        (i % 2, encode(_event(f"n{i}", f"vc-{i % 7}", 8, 16, f"plan-{i}"))) for i in range(3000)
    ]
    prefix = await _topic_with_events(kafka, [])
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=20) as producer:
        for partition, value in many:
            await producer.send(f"{prefix}scaling-events", value, partition=partition)
        await producer.flush()
    proc = _spawn(kafka, prefix, "--from-beginning", "--timeout", "30")
    try:
        first = await asyncio.to_thread(proc.stdout.readline)
        proc.stdout.close()  # like `dprobe events | head -1`
        _, err = await asyncio.to_thread(proc.communicate, timeout=60)
    finally:
        proc.kill()
    assert "scale_up" in first
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    printed = int(err.rsplit("dprobe events: ", 1)[1].split()[0])
    assert printed < 3000  # stopped when the pipe closed, did not wait for the timeout


async def test_plans_mode_prints_whole_plans_and_the_newest_target_wins(kafka) -> None:
    """Two plans, their events spread over two partitions as a catch-up reads them
    (partition 0 first: plan 2's vc-a event before plan 1's): --plans prints whole plans
    in plan order (plan 2, complete first, waits for plan 1), and vc-a ends at plan 2's
    target."""
    import msgspec

    def planned(e: ScalingEvent, seq: int, size: int) -> ScalingEvent:
        return msgspec.structs.replace(e, plan_id=f"plan-{seq}", plan_seq=seq, plan_size=size)

    p1a = planned(_event("a1", "vc-a", 8, 16, ""), 1, 2)
    p1b = planned(_event("b1", "vc-b", 24, 16, ""), 1, 2)
    p2a = planned(_event("a2", "vc-a", 16, 24, ""), 2, 2)
    p2c = planned(_event("c2", "vc-c", 16, 8, ""), 2, 2)
    records = [(0, encode(p2a)), (0, encode(p1a)), (1, encode(p2c)), (1, encode(p1b))]
    prefix = await _topic_with_events(kafka, records)
    res = _run(kafka, prefix, "--from-beginning", "--timeout", "3", "--plans", "--json")
    assert res.returncode == 0, res.stderr
    printed = [json.loads(line) for line in res.stdout.splitlines()]
    final = {}
    for ev in printed:
        final[ev["tenant"]] = ev["target_quota_gpus"]
    assert final == {"vc-a": 24, "vc-b": 16, "vc-c": 8}
    assert [ev["event_id"] for ev in printed] == ["a1", "b1", "a2", "c2"]


async def test_a_topic_that_does_not_exist_is_named_and_not_created(kafka) -> None:
    """A misspelt prefix: exit 2 naming the topic and the prefix, at once (not after the
    client's metadata timeout), and the local broker, which creates topics on demand, is
    not made to create it."""
    from aiokafka.admin import AIOKafkaAdminClient

    prefix = kafka.unique("evmissing") + "."
    for group in ([], ["--group", kafka.unique("evg")]):
        started = time.monotonic()
        res = _run(kafka, prefix, "--timeout", "5", *group)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip() == (
            f"dprobe events: topic {prefix}scaling-events does not exist: start a worker first "
            f"(it creates the topic), or check the topic prefix (kafka.topic_prefix, now "
            f"{prefix!r})"
        )
        assert time.monotonic() - started < 20
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        assert f"{prefix}scaling-events" not in await admin.list_topics()
    finally:
        await admin.close()
