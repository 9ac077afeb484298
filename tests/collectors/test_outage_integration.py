"""Done-when: a broker outage of >= 30 s wall time loses no snapshot.

A collector with the synthetic backend on a 10x clock produces to its own local broker;
the broker is stopped for at least 30 s, then restarted on the same state dir. Afterwards
every seq from the first to the last is in the topic, in order (duplicates from retried
batches are allowed; consumers drop them by (host, seq)).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from dprobe.collectors.assemble import build_collector
from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.sender import KafkaSender
from dprobe.collectors.spool import Spool
from dprobe.config import CollectorSettings, KafkaSettings
from dprobe.schema import decode_snapshot

from .own_broker import broker_pid, own_broker, wait_for
from .test_produce_integration import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OUTAGE_S = 31.0


async def test_no_seq_is_lost_across_a_broker_outage(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with own_broker(tmp_path, request, topic="outage-samples") as broker:
        registry = CollectorRegistry()
        settings = CollectorSettings(
            kafka=KafkaSettings(bootstrap=broker.bootstrap, request_timeout_ms=5000),
            host_id="outage-host",
            interval_s=1.0,
            clock_speed=10.0,  # 10 snapshots per wall second
            spool_dir=tmp_path / "spool",
            state_dir=tmp_path / "state",
            synthetic_gpus=4,
            send_timeout_s=3.0,
            spool_fsync=False,
        )
        collector = build_collector(settings, registry=registry, topic="outage-samples")
        sent = lambda: registry.get_sample_value("dprobe_collector_sent_snapshots_total") or 0  # noqa: E731
        await collector.start()
        try:
            await wait_for(lambda: sent() >= 20, 30, "first deliveries")

            await asyncio.to_thread(broker.stop)
            down_at = time.monotonic()
            sent_at_stop = sent()
            await asyncio.sleep(OUTAGE_S)
            assert time.monotonic() - down_at >= 30.0
            spooled = collector.spool.pending_records
            assert spooled >= 150  # ~10 per second are taken while Kafka is away
            assert registry.get_sample_value("dprobe_collector_kafka_up") == 0
            assert registry.get_sample_value("dprobe_collector_spool_bytes") > 0

            await asyncio.to_thread(broker.start)
            await wait_for(lambda: collector.spool.pending_records < 5, 90, "the spool to drain")
            assert sent() > sent_at_stop + spooled - 50
        finally:
            await collector.stop()
        last_seq = collector.seq.peek() - 1
        assert collector.spool.pending_records == 0

        records = await read_topic(
            broker.bootstrap, "outage-samples", expect=last_seq + 1, timeout_s=60
        )
        seqs = [decode_snapshot(r.value).seq for r in sorted(records, key=lambda r: r.offset)]
        assert {r.key for r in records} == {b"outage-host"}
        first_occurrences: list[int] = []
        seen: set[int] = set()
        for s in seqs:
            if s not in seen:
                seen.add(s)
                first_occurrences.append(s)
        assert first_occurrences == list(range(last_seq + 1))  # all there, in order, no gap
        assert registry.get_sample_value(
            "dprobe_collector_dropped_snapshots_total", {"reason": "spool_full"}
        ) in (None, 0.0)
        print(
            f"\noutage: {len(seqs)} records, {last_seq + 1} distinct seqs, "
            f"{len(seqs) - len(seen)} duplicates, {spooled} spooled during {OUTAGE_S}s"
        )


@pytest.mark.parametrize("outage", ["stopped", "hung"])
async def test_a_producer_given_up_on_while_kafka_is_away_leaves_nothing_running(
    outage: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A delivery that fails while the broker is down (or hung: its process stopped, so
    connections open but nothing answers) makes the sender replace its
    producer. The old one still holds the unconfirmed batch, which an idempotent producer
    retries for ever: it must be closed all the same (no task, no connection left), or
    every failed delivery of a long-running collector leaves one more client behind. And
    closing it leaves no error for asyncio to log (an unretrieved exception, a pending
    task destroyed, an unclosed producer)."""
    async with own_broker(tmp_path, request, topic="given-up") as broker:
        spool = Spool(tmp_path / "spool", max_bytes=1 << 20, fsync=False)
        spool.open()
        registry = CollectorRegistry()
        made: list[AIOKafkaProducer] = []

        def producer() -> AIOKafkaProducer:
            made.append(AIOKafkaProducer(**sender.producer_config()))
            return made[-1]

        sender = KafkaSender(
            KafkaSettings(bootstrap=broker.bootstrap, request_timeout_ms=5000),
            "given-up",
            key=b"h1",
            spool=spool,
            metrics=CollectorMetrics(registry),
            send_timeout_s=2.0,
            producer_factory=producer,
        )
        pid = broker_pid(tmp_path)
        before = asyncio.all_tasks()
        spool.append(0, b"0")
        await sender.start()
        assert await sender.flush(30.0)

        if outage == "stopped":
            await asyncio.to_thread(broker.stop)
        else:
            os.kill(pid, signal.SIGSTOP)
        spool.append(1, b"1")
        sender.notify()
        failed = lambda: registry.get_sample_value(  # noqa: E731
            "dprobe_collector_send_errors_total", {"kind": "timeout"}
        )
        await wait_for(lambda: (failed() or 0) >= 1 and len(made) >= 2, 30, "a failed delivery")
        await sender.stop(timeout_s=0)
        await asyncio.sleep(0.5)
        left = [t for t in asyncio.all_tasks() - before if not t.done()]
        assert left == [], [t.get_coro() for t in left]
        assert spool.pending_records == 1  # the snapshot waits in the spool for the next run
        made.clear()
        gc.collect()
        await asyncio.sleep(0.1)
        assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
