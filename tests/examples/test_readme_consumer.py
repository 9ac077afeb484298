"""The scaling-events consumer printed in the README, run as written: duplicates dropped by
id, a record that is not an event skipped with its offset, each plan applied once all of
its events are in (quota given back first), and the group's progress committed only
when no plan is half-received (against a stand-in consumer, and on a real broker)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dprobe.schema import encode
from tests.examples.test_kueue_quota_consumer import ev

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_consumer() -> str:
    """The Python block of the README's "Consuming the scaling events" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Consuming the scaling events", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_block_is_the_consumer_it_describes() -> None:
    code = readme_consumer()
    for needle in ('"dprobe.scaling-events"', '"127.0.0.1:9092"', 'group_id="quota-controller"'):
        assert needle in code


# A stand-in for aiokafka: gives the records of FAKE_RECORDS (hex values) one per batch,
# then a Ctrl-C; prints each commit with the offset committed, and "stop".
FAKE_AIOKAFKA = """
import json, os
from types import SimpleNamespace


class AIOKafkaConsumer:
    def __init__(self, *topics, **config):
        with open(os.environ["FAKE_RECORDS"]) as fh:
            self.records = [bytes.fromhex(h) for h in json.load(fh)]
        self.next = 0  # the offset of the next record

    async def start(self):
        if os.environ.get("FAKE_START_WAITS"):  # a group join that waits (a dead member)
            print("starting", flush=True)
            import asyncio

            await asyncio.sleep(3600)

    async def stop(self):
        print("stop")

    async def getmany(self, timeout_ms=0):  # one record per batch; Ctrl-C once all are read
        if self.next == len(self.records):
            raise KeyboardInterrupt
        offset, self.next = self.next, self.next + 1
        return {"tp": [SimpleNamespace(offset=offset, value=self.records[offset])]}

    def assignment(self):
        return {"tp"}

    async def position(self, tp):
        return self.next

    async def commit(self, offsets):
        print(f"commit {offsets['tp']}")
"""


def test_the_readme_consumer_applies_whole_plans_and_commits_after_them(tmp_path: Path) -> None:
    records = [
        encode(ev("e1", "vc-a", 8, 16, size=3, seq=1)),
        encode(ev("e1", "vc-a", 8, 16, size=3, seq=1)),  # the same event again
        b"not an event",
        encode(ev("e2", "vc-b", 16, 12, size=3, seq=1)),
        encode(ev("e3", "vc-c", 8, 4, size=3, seq=1)),
        encode(ev("f1", "vc-a", 16, 12, plan="p2")),  # no plan_size: balanced when complete
        encode(ev("f2", "vc-b", 12, 16, plan="p2")),
    ]
    (tmp_path / "records.json").write_text(json.dumps([r.hex() for r in records]))
    (tmp_path / "aiokafka").mkdir()
    (tmp_path / "aiokafka" / "__init__.py").write_text(FAKE_AIOKAFKA)
    (tmp_path / "consumer.py").write_text(readme_consumer())
    env = {**os.environ, "FAKE_RECORDS": str(tmp_path / "records.json")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    res = subprocess.run(
        [sys.executable, str(tmp_path / "consumer.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0].startswith("skipping offset 2: ")
    assert out[1:] == [
        "p1 vc-b 16.0 -> 12.0",  # quota given back first
        "p1 vc-c 8.0 -> 4.0",
        "p1 vc-a 8.0 -> 16.0",
        "commit 5",  # nothing committed while p1 was half-received
        "p2 vc-a 16.0 -> 12.0",
        "p2 vc-b 12.0 -> 16.0",
        "commit 7",
        "stop",
    ]


def test_ctrl_c_while_the_readme_consumer_starts_stops_it(tmp_path: Path) -> None:
    # aiokafka's start() of a consumer given its topic waits for the group's join (as long
    # as a member that died holds it): stopped there, an unstopped consumer is reported
    # by asyncio as "Unclosed AIOKafkaConsumer"
    (tmp_path / "records.json").write_text("[]")
    (tmp_path / "aiokafka").mkdir()
    (tmp_path / "aiokafka" / "__init__.py").write_text(FAKE_AIOKAFKA)
    (tmp_path / "consumer.py").write_text(readme_consumer())
    env = {**os.environ, "FAKE_RECORDS": str(tmp_path / "records.json"), "FAKE_START_WAITS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "consumer.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "starting\n"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["stop"]


def _run_until(cmd: list[str], lines: int, timeout_s: float) -> tuple[list[str], str]:
    """Start ``cmd``, collect its stdout lines until ``lines`` came (or the timeout) and
    one more second after, then stop it: its stdout lines and its stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            got.put(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    out: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < lines and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            out.append(got.get(timeout=0.2))
    time.sleep(1.0)  # anything printed after the expected lines is a failure too
    proc.send_signal(signal.SIGINT)  # Ctrl-C: it stops quietly
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
    reader.join(timeout=5)
    while not got.empty():
        out.append(got.get())
    return out, err


@pytest.mark.integration
async def test_the_readme_consumer_applies_each_plan_once(kafka, tmp_path: Path) -> None:
    from aiokafka import AIOKafkaProducer

    topic = await kafka.create_topic("scaling-events", partitions=1)
    group = kafka.unique("quota-controller")
    records = [
        encode(ev("e1", "vc-a", 8, 16)),
        encode(ev("e1", "vc-a", 8, 16)),  # the same event again
        b"not an event",
        encode(ev("e2", "vc-b", 16, 8)),
    ]
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for value in records:
            await producer.send_and_wait(topic, value)
    script = tmp_path / "consumer.py"
    code = readme_consumer()
    code = code.replace('"dprobe.scaling-events"', repr(topic))
    code = code.replace('"127.0.0.1:9092"', repr(kafka.bootstrap))
    code = code.replace('"quota-controller"', repr(group))
    script.write_text(code, encoding="utf-8")

    out, err = _run_until([sys.executable, str(script)], lines=3, timeout_s=60)
    assert len(out) == 3, (out, err)
    assert out[0].startswith("skipping offset 2: "), (out, err)
    assert out[1:] == ["p1 vc-b 16.0 -> 8.0", "p1 vc-a 8.0 -> 16.0"], (out, err)
    # it committed what it applied: the same group started again applies nothing old
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(topic, encode(ev("e3", "vc-c", 4, 8, plan="p2")))
        await producer.send_and_wait(topic, encode(ev("e4", "vc-d", 8, 4, plan="p2")))
    again, err = _run_until([sys.executable, str(script)], lines=2, timeout_s=60)
    assert again == ["p2 vc-d 8.0 -> 4.0", "p2 vc-c 4.0 -> 8.0"], (again, err)


@pytest.mark.integration
async def test_the_readme_consumer_leaves_no_lag_after_transactional_plans(
    kafka, tmp_path: Path
) -> None:
    # the worker sends each plan in a transaction, whose commit marker takes the offset
    # after the plan's last event: a consumer caught up must commit past it, or its group
    # shows a lag of 1 for ever
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = await kafka.create_topic("scaling-events", partitions=1)
    group = kafka.unique("quota-controller")
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.bootstrap, transactional_id=kafka.unique("planner")
    )
    async with producer:
        for plan, (donor, receiver) in (("p1", ("vc-a", "vc-b")), ("p2", ("vc-b", "vc-a"))):
            async with producer.transaction():
                for e in (
                    ev(f"{plan}-d", donor, 16, 8, plan=plan, size=2, seq=1),
                    ev(f"{plan}-r", receiver, 8, 16, plan=plan, size=2, seq=2),
                ):
                    await producer.send(topic, encode(e), key=e.tenant.encode())
    script = tmp_path / "consumer.py"
    code = readme_consumer().replace('"dprobe.scaling-events"', repr(topic))
    code = code.replace('"127.0.0.1:9092"', repr(kafka.bootstrap))
    script.write_text(code.replace('"quota-controller"', repr(group)), encoding="utf-8")

    out, err = _run_until([sys.executable, str(script)], lines=4, timeout_s=60)
    assert len(out) == 4, (out, err)
    tp = TopicPartition(topic, 0)
    async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group) as reader:
        end = (await reader.end_offsets([tp]))[tp]
        assert end == 6  # 4 events and a commit marker per plan
        assert await reader.committed(tp) == end
