"""KafkaSender against an in-memory producer that can refuse connects and deliveries."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError
from prometheus_client import CollectorRegistry

from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.sender import KafkaSender
from dprobe.collectors.spool import Spool
from dprobe.config import KafkaSettings, Secret


class Broker:
    """What the fake producers deliver to; ``down`` makes connects and sends fail."""

    def __init__(self) -> None:
        self.log: list[tuple[bytes, bytes]] = []
        self.down = False
        self.producers: list[FakeProducer] = []


class FakeProducer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.started = self.stopped = False
        broker.producers.append(self)

    async def start(self) -> None:
        if self.broker.down:
            raise KafkaConnectionError("Unable to bootstrap")
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if self.broker.down:
            fut.set_exception(KafkaTimeoutError())
        else:
            self.broker.log.append((key, value))
            fut.set_result(None)
        return fut


def setup(tmp_path: Path, broker: Broker, **kw):
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    spool = Spool(tmp_path, max_bytes=1 << 20, fsync=False)
    spool.open()
    sender = KafkaSender(
        KafkaSettings(),
        "t",
        key=b"h1",
        spool=spool,
        metrics=metrics,
        producer_factory=lambda: FakeProducer(broker),
        **kw,
    )
    return sender, spool, registry


def delivered(broker: Broker) -> list[int]:
    return [int(v.decode()) for _, v in broker.log]


async def test_delivers_in_order_with_the_host_key(tmp_path) -> None:
    broker = Broker()
    sender, spool, reg = setup(tmp_path, broker, batch_max=4)
    for i in range(10):
        spool.append(i, str(i).encode())
    await sender.start()
    assert await sender.flush(5.0)
    await sender.stop()
    assert delivered(broker) == list(range(10))
    assert {k for k, _ in broker.log} == {b"h1"}
    assert reg.get_sample_value("dprobe_collector_sent_snapshots_total") == 10
    assert reg.get_sample_value("dprobe_collector_send_latency_seconds_count") == 3  # 4+4+2
    assert len(broker.producers) == 1 and broker.producers[0].stopped


async def test_an_outage_is_spooled_then_sent_in_order_before_new_data(tmp_path) -> None:
    broker = Broker()
    sender, spool, reg = setup(tmp_path, broker)
    await sender.start()
    spool.append(0, b"0")
    sender.notify()
    assert await sender.flush(5.0)
    broker.down = True
    for i in range(1, 6):
        spool.append(i, str(i).encode())
        sender.notify()
        await asyncio.sleep(0.01)
    assert not await sender.flush(0.2)  # gives up at the first failure, keeps the data
    assert spool.pending_records == 5
    assert reg.get_sample_value("dprobe_collector_kafka_up") == 0
    broker.down = False
    spool.append(6, b"6")
    sender.notify()
    assert await sender.flush(10.0)
    await sender.stop()
    seqs = delivered(broker)
    assert seqs == list(range(7))
    assert reg.get_sample_value("dprobe_collector_kafka_up") == 1
    # aiokafka's KafkaTimeoutError is no TimeoutError: still counted as the documented kind
    errors = "dprobe_collector_send_errors_total"
    assert (reg.get_sample_value(errors, {"kind": "timeout"}) or 0) >= 1
    assert reg.get_sample_value(errors, {"kind": "KafkaTimeoutError"}) is None


async def test_stop_with_kafka_down_returns_and_keeps_the_spool(tmp_path) -> None:
    broker = Broker()
    broker.down = True
    sender, spool, _ = setup(tmp_path, broker)
    for i in range(3):
        spool.append(i, str(i).encode())
    await sender.start()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await sender.stop(timeout_s=2.0)
    await sender.stop(timeout_s=2.0)  # idempotent
    assert loop.time() - t0 < 2.5
    assert spool.pending_records == 3 and broker.log == []


async def test_producer_is_idempotent_acks_all_compressed_and_keeps_security_settings(
    tmp_path,
) -> None:
    kafka = KafkaSettings(
        bootstrap="k1:9093",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="dprobe",
        sasl_password=Secret("pw"),
    )
    for compression in ("zstd", "lz4"):
        sender = KafkaSender(
            kafka,
            "t",
            key=b"h1",
            spool=Spool(tmp_path),
            metrics=CollectorMetrics(CollectorRegistry()),
            compression=compression,
        )
        cfg = sender.producer_config()
        assert (cfg["acks"], cfg["enable_idempotence"], cfg["compression_type"]) == (
            "all",
            True,
            compression,
        )
        assert cfg["bootstrap_servers"] == "k1:9093"
        assert (cfg["sasl_mechanism"], cfg["sasl_plain_username"], cfg["sasl_plain_password"]) == (
            "SCRAM-SHA-512",
            "dprobe",
            "pw",
        )
    # both codecs are installed (aiokafka refuses a codec whose library is missing)
    for compression in ("zstd", "lz4"):
        sender = KafkaSender(
            KafkaSettings(),
            "t",
            key=b"h1",
            spool=Spool(tmp_path),
            metrics=CollectorMetrics(CollectorRegistry()),
            compression=compression,
        )
        producer = sender._default_producer()
        await producer.stop()


async def test_a_missing_codec_library_is_a_usage_error_at_start(tmp_path, monkeypatch) -> None:
    import dprobe.collectors.sender as sender_module
    from dprobe.errors import UsageError

    monkeypatch.setitem(sender_module._CODECS, "zstd", lambda: False)
    sender, _, _ = setup(tmp_path, Broker(), compression="zstd")
    with pytest.raises(UsageError, match="aiokafka\\[zstd\\]"):
        await sender.start()
    await sender.stop()


async def test_stop_returns_even_when_a_cancellation_is_lost(tmp_path) -> None:
    """A cancellation swallowed below the loop (Python 3.11's wait_for loses one when the
    inner call finishes in the same turn) must not keep a stopping collector alive."""
    broker = Broker()
    broker.down = True
    sender, spool, _ = setup(tmp_path, broker)
    swallowed = 0

    async def sleep_swallowing_cancel(seconds: float) -> None:
        nonlocal swallowed
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            swallowed += 1

    sender._sleep = sleep_swallowing_cancel  # type: ignore[method-assign]
    spool.append(0, b"0")
    await sender.start()
    await asyncio.sleep(0.05)  # the loop is in its backoff sleep after a failed connect
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await asyncio.wait_for(sender.stop(timeout_s=0.2), 10.0)
    assert swallowed >= 1
    assert loop.time() - t0 < 2.0
    assert spool.pending_records == 1 and sender._task is not None and sender._task.done()


async def test_a_stop_while_connecting_closes_the_producer_it_was_starting(tmp_path) -> None:
    """SIGTERM (or a failed start of the rest of the collector) while the producer is still
    connecting, to a broker that does not answer, stops that producer too: aiokafka logs
    'Unclosed AIOKafkaProducer' for one never stopped, and its connections stay open."""
    broker = Broker()
    connecting = asyncio.Event()

    class HangingProducer(FakeProducer):
        async def start(self) -> None:
            connecting.set()
            await asyncio.sleep(3600)  # a broker address that swallows packets

    sender, spool, _ = setup(tmp_path, broker)
    sender._factory = lambda: HangingProducer(broker)
    spool.append(0, b"0")
    await sender.start()
    await asyncio.wait_for(connecting.wait(), 5.0)
    await asyncio.wait_for(sender.stop(timeout_s=0.1), 10.0)
    [producer] = broker.producers
    assert producer.stopped
    assert spool.pending_records == 1
