"""Foundation: HostSnapshots survive a trip through a real Kafka broker field by field."""

from __future__ import annotations

import random

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from dprobe import schema
from tests.conftest import KafkaHelper

pytestmark = pytest.mark.integration


def _snapshot(rng: random.Random, host: str, seq: int) -> schema.HostSnapshot:
    gpus = tuple(
        schema.Gpu(
            uuid=f"GPU-{host}-{i}",
            index=i,
            util=rng.uniform(0, 100),
            mem_util=rng.uniform(0, 100),
            mem_used=rng.randrange(0, 80 << 30),
            mem_total=80 << 30,
            power_w=rng.uniform(50, 700),
            sm_clock_mhz=rng.choice([None, 1980.0]),
        )
        for i in range(2)
    )
    procs = tuple(
        schema.Proc(
            pid=rng.randrange(1, 1 << 22),
            gpu=rng.choice(gpus).uuid,
            tenant=f"vc{rng.randrange(4)}",
            job=f"job-{rng.randrange(100)}",
            sm_util=rng.uniform(0, 100),
            mem_util=rng.uniform(0, 100),
            mem_used=rng.randrange(0, 40 << 30),
            model=rng.choice([None, "resnet50"]),
            batch_size=rng.choice([None, 64]),
            amp=rng.choice([None, True, False]),
        )
        for _ in range(rng.randrange(0, 4))
    )
    return schema.HostSnapshot(
        host=host, ts=1.7e9 + seq, interval_s=1.0, seq=seq, gpus=gpus, procs=procs
    )


async def test_10k_snapshots_round_trip_field_by_field(kafka: KafkaHelper) -> None:
    topic = await kafka.create_topic("samples", partitions=3)
    rng = random.Random(7)
    sent = [_snapshot(rng, f"host-{i % 5}", i // 5) for i in range(10_000)]
    producer = AIOKafkaProducer(
        **kafka.settings.client_kwargs(),
        enable_idempotence=True,
        acks="all",
        compression_type="zstd",
        linger_ms=5,
    )
    async with producer:
        futures = [
            await producer.send(topic, key=s.host.encode(), value=schema.encode(s)) for s in sent
        ]
        await producer.flush()
        for f in futures:
            assert f.done() and f.exception() is None
    consumer = AIOKafkaConsumer(
        topic,
        **kafka.settings.client_kwargs(),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    received: list[schema.HostSnapshot] = []
    async with consumer:
        while len(received) < len(sent):
            batch = await consumer.getmany(timeout_ms=5000)
            assert batch, f"stalled after {len(received)} records"
            for records in batch.values():
                for r in records:
                    snap = schema.decode_snapshot(r.value)
                    assert r.key == snap.host.encode()
                    received.append(snap)
    assert len(received) == len(sent)
    by_key = {(s.host, s.seq): s for s in received}
    assert len(by_key) == len(sent)
    for s in sent:
        got = by_key[(s.host, s.seq)]
        assert schema.to_builtins(got) == schema.to_builtins(s)
    # Per host (one key -> one partition) the order is preserved.
    for host in {s.host for s in sent}:
        seqs = [r.seq for r in received if r.host == host]
        assert seqs == sorted(seqs)
