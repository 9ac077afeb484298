"""The scaling-events consumer printed in the README, run as written against a real broker:
each event printed once (duplicates dropped by id), a record that is not an event
skipped with its offset, and the group's progress committed."""

from __future__ import annotations

import contextlib
import queue
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
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    reader.join(timeout=5)
    while not got.empty():
        out.append(got.get())
    return out, err


@pytest.mark.integration
async def test_the_readme_consumer_prints_each_event_once(kafka, tmp_path: Path) -> None:
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
    assert out[0] == "vc-a scale_up 8.0 -> 16.0 r", (out, err)
    assert out[1].startswith("skipping offset 2: "), (out, err)
    assert out[2] == "vc-b scale_down 16.0 -> 8.0 r", (out, err)
    # it committed what it printed: the same group started again prints nothing old
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(topic, encode(ev("e3", "vc-c", 4, 8)))
    again, err = _run_until([sys.executable, str(script)], lines=1, timeout_s=60)
    assert again == ["vc-c scale_up 4.0 -> 8.0 r"], (again, err)
