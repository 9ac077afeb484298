"""``dprobe cluster show`` on the real broker: the report it prints for a source is the
one in force, i.e. the last one on the topic, as the worker applies them and as
compaction keeps them; a source retired by a tombstone is not shown."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from dprobe.cli import main
from dprobe.schema import decode_cluster_report

pytestmark = pytest.mark.integration


async def _last_per_key(bootstrap: str, topic: str) -> dict[str, object]:
    """The reference: every record of ``topic`` in offset order, the last one per key."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: dict[str, object] = {}
        while await consumer.position(tp) < end:
            for rec in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                if rec.value is None:  # a tombstone: compaction drops the key
                    out.pop(rec.key.decode(), None)
                else:
                    out[rec.key.decode()] = decode_cluster_report(rec.value)
        return out
    finally:
        await consumer.stop()


async def test_show_prints_the_last_report_of_a_source_even_with_an_older_ts(
    kafka, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = kafka.unique("cl") + "."
    topic = await kafka.create_named(f"{prefix}cluster", 1, **{"cleanup.policy": "compact"})
    reports = [  # the adapter's clock went back between its two reports
        {"v": 1, "ts": 2_000_000_000.0, "source": "kueue", "quotas": {"vc-a": 8.0}},
        {"v": 1, "ts": 1_900_000_000.0, "source": "kueue", "quotas": {"vc-a": 16.0}},
        {"v": 1, "ts": 1_800_000_000.0, "source": "cron", "capacity_gpus": 64.0, "quotas": {}},
    ]
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for r in reports:
            await producer.send_and_wait(
                topic, json.dumps(r).encode(), key=str(r["source"]).encode()
            )
    expected = await _last_per_key(kafka.bootstrap, topic)
    assert expected["kueue"].quotas == {"vc-a": 16.0}  # type: ignore[attr-defined]

    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    monkeypatch.delenv("DPROBE_CONFIG", raising=False)
    # main() runs its own event loop: in a thread, away from this test's
    code = await asyncio.to_thread(
        main, ["--bootstrap", kafka.bootstrap, "cluster", "show", "--json"]
    )
    assert code == 0
    shown = json.loads(capsys.readouterr().out)
    got = [decode_cluster_report(json.dumps(r).encode()) for r in shown]
    assert {r.source: r for r in got} == expected


async def test_a_source_retired_by_a_tombstone_is_not_shown(
    kafka, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = kafka.unique("cl") + "."
    topic = await kafka.create_named(f"{prefix}cluster", 1, **{"cleanup.policy": "compact"})
    old = {"v": 1, "ts": 1_800_000_000.0, "source": "old-adapter", "quotas": {"vc-a": 8.0}}
    new = {"v": 1, "ts": 1_800_000_100.0, "source": "kueue", "quotas": {"vc-a": 16.0}}
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for r in (old, new):
            await producer.send_and_wait(
                topic, json.dumps(r).encode(), key=str(r["source"]).encode()
            )
        await producer.send_and_wait(topic, None, key=b"old-adapter")
    expected = await _last_per_key(kafka.bootstrap, topic)
    assert set(expected) == {"kueue"}

    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    monkeypatch.delenv("DPROBE_CONFIG", raising=False)
    code = await asyncio.to_thread(
        main, ["--bootstrap", kafka.bootstrap, "cluster", "show", "--json"]
    )
    assert code == 0
    out, err = capsys.readouterr()
    got = [decode_cluster_report(json.dumps(r).encode()) for r in json.loads(out)]
    assert {r.source: r for r in got} == expected
    assert "skipping" not in err  # a tombstone is not an invalid record


async def test_a_read_cut_short_says_so_instead_of_showing_old_reports_as_the_last(
    kafka, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A topic it cannot read to its end in time (here: no time at all) is said on
    stderr, with where the read stopped: what it shows may not be the last word."""
    from dprobe.commands import cluster

    prefix = kafka.unique("cl") + "."
    topic = await kafka.create_named(f"{prefix}cluster", 1, **{"cleanup.policy": "compact"})
    report = {"v": 1, "ts": 1_800_000_000.0, "source": "kueue", "quotas": {"vc-a": 8.0}}
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(topic, json.dumps(report).encode(), key=b"kueue")
    monkeypatch.setattr(cluster, "SHOW_READ_S", 0.0)
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    monkeypatch.delenv("DPROBE_CONFIG", raising=False)
    code = await asyncio.to_thread(main, ["--bootstrap", kafka.bootstrap, "cluster", "show"])
    assert code == 0
    err = capsys.readouterr().err
    assert (
        f"dprobe cluster: warning: stopped reading {topic}[0] after 0 s at offset 0 of 1: " in err
    )
