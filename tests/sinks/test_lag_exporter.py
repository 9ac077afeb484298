"""``dprobe lag`` on the real broker: a group's lag is exported whether or not any of its
consumers runs, and a real Prometheus server sees it rise while nobody consumes."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from dprobe.config import LagSettings
from dprobe.sinks.lag_exporter import LagExporter
from dprobe.sinks.metrics_server import MetricsServer
from tests.conftest import _free_port
from tests.sinks.test_consumer_lag import _commit, _produce

pytestmark = pytest.mark.integration


async def _wait_refreshed(exporter: LagExporter, after: float, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(p.updated_at is not None and p.updated_at > after for p in exporter.pollers):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the exporter did not refresh")


async def test_a_group_nobody_runs_is_exported_with_kafka_exporters_names(kafka) -> None:
    topic = await kafka.create_topic("lag", partitions=2)
    group = kafka.unique("group")
    await _produce(kafka.bootstrap, topic, {0: 10, 1: 6})
    await _commit(kafka.bootstrap, group, {TopicPartition(topic, 0): 3})
    reg = CollectorRegistry()
    settings = LagSettings(kafka=kafka.settings, groups=(group,), interval_s=0.3)

    def value(name: str, **labels: str) -> float | None:
        return reg.get_sample_value(name, {"consumergroup": group, **labels})

    async with LagExporter(settings, reg) as exporter:
        await _wait_refreshed(exporter, time.time())
        # partition 1 was never committed: it lags by everything from its beginning
        assert value("kafka_consumergroup_lag", topic=topic, partition="0") == 7
        assert value("kafka_consumergroup_lag", topic=topic, partition="1") == 6
        assert value("kafka_consumergroup_lag_sum", topic=topic) == 13
        assert value("kafka_consumergroup_current_offset", topic=topic, partition="0") == 3
        assert value("kafka_consumergroup_current_offset", topic=topic, partition="1") is None
        ends = {"topic": topic, "partition": "0"}
        assert reg.get_sample_value("kafka_topic_partition_current_offset", ends) == 10
        assert reg.get_sample_value("kafka_topic_partitions", {"topic": topic}) == 2
        assert value("kafka_consumergroup_members") == 0
        await _produce(kafka.bootstrap, topic, {0: 5})
        # a refresh in flight may have read the end offsets before the produce: wait for
        # the one after it
        deadline = time.monotonic() + 30
        while value("kafka_consumergroup_lag_sum", topic=topic) != 18:
            assert time.monotonic() < deadline, value("kafka_consumergroup_lag_sum", topic=topic)
            await _wait_refreshed(exporter, time.time())
        assert value("kafka_consumergroup_lag_sum", topic=topic) == 18
        assert value("dprobe_lag_refresh_errors_total") == 0


def _query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.request.quote(expr)}"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]["result"]


def _prometheus(
    folder: Path, *, target: str, port: int, worker: str | None = None
) -> subprocess.Popen[bytes]:
    """A real Prometheus server scraping ``target`` (and ``worker``) every second."""
    jobs = [("dprobe-lag", target)] + ([("dprobe-worker", worker)] if worker else [])
    (folder / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n"
        + "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['{t}']\n"
            for job, t in jobs
        )
    )
    return subprocess.Popen(
        [
            "prometheus", f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus binary here")
async def test_prometheus_sees_lag_rise_while_the_group_is_stopped(kafka, tmp_path: Path) -> None:
    topic = await kafka.create_topic("lag", partitions=1)
    group = kafka.unique("group")
    await _produce(kafka.bootstrap, topic, {0: 5})
    await _commit(kafka.bootstrap, group, {TopicPartition(topic, 0): 5})
    reg = CollectorRegistry()
    settings = LagSettings(kafka=kafka.settings, groups=(group,), interval_s=0.5)
    server = MetricsServer(reg, port=0)
    server.start()
    prom_port = _free_port()
    prom = _prometheus(tmp_path, target=f"127.0.0.1:{server.port}", port=prom_port)
    expr = f'kafka_consumergroup_lag_sum{{consumergroup="{group}"}}'
    seen: list[float] = []
    try:
        async with LagExporter(settings, reg):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (len(seen) < 3 or seen[-1] <= seen[0]):
                await _produce(kafka.bootstrap, topic, {0: 20})  # nobody consumes
                await asyncio.sleep(1.5)
                try:
                    result = await asyncio.to_thread(_query, prom_port, expr)
                except OSError:  # the server is still starting
                    continue
                if result:
                    seen.append(float(result[0]["value"][1]))
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        server.stop()
    assert len(seen) >= 3, seen
    assert seen[-1] > seen[0] and seen == sorted(seen), seen


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus binary here")
async def test_prometheus_sees_the_lag_of_a_stopped_worker_rise(kafka, tmp_path: Path) -> None:
    """A real worker and the lag exporter, both scraped: while the worker runs its lag
    stays low; once it is stopped the worker's target is down and
    kafka_consumergroup_lag_sum keeps rising."""
    from dprobe import schema
    from tests.streams.helpers import create_worker_topics, make_snapshots, worker_process

    prefix = f"{kafka.unique('p')}."
    app_id = kafka.unique("group")
    await create_worker_topics(kafka.bootstrap, prefix, partitions=1)
    samples = f"{prefix}samples"
    worker_port, prom_port = _free_port(), _free_port()
    reg = CollectorRegistry()
    settings = LagSettings(
        kafka=kafka.settings, groups=(app_id,), topics=(samples,), interval_s=0.5
    )
    server = MetricsServer(reg, port=0)
    server.start()
    prom = _prometheus(
        tmp_path, target=f"127.0.0.1:{server.port}", port=prom_port,
        worker=f"127.0.0.1:{worker_port}",
    )  # fmt: skip
    snaps = iter(make_snapshots(hosts=2, ticks=10_000))
    lag = f'kafka_consumergroup_lag_sum{{consumergroup="{app_id}",topic="{samples}"}}'

    async def feed(n: int) -> None:
        values = [schema.encode(next(snaps)) for _ in range(n)]
        await _produce_values(kafka.bootstrap, samples, values)

    async def query(expr: str) -> float | None:
        try:
            result = await asyncio.to_thread(_query, prom_port, expr)
        except OSError:
            return None
        return float(result[0]["value"][1]) if result else None

    after: list[float] = []
    try:
        async with LagExporter(settings, reg):
            env = {"DPROBE_WORKER_METRICS_PORT": str(worker_port)}
            with worker_process(
                kafka.settings, prefix=prefix, app_id=app_id, data_dir=tmp_path / "w",
                partitions=1, env=env, log=tmp_path / "worker.log",
            ):  # fmt: skip
                deadline = time.monotonic() + 90
                up = None
                while time.monotonic() < deadline and up != 1.0:
                    await feed(20)
                    await asyncio.sleep(1.0)
                    up = await query('up{job="dprobe-worker"}')
                assert up == 1.0, "the worker was never scraped"
                running = None
                while time.monotonic() < deadline and running is None:
                    await asyncio.sleep(1.0)
                    running = await query(lag)
            # the worker is stopped now
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (len(after) < 3 or after[-1] <= after[0]):
                await feed(50)
                await asyncio.sleep(1.5)
                value = await query(lag)
                if value is not None:
                    after.append(value)
            down = await query('up{job="dprobe-worker"}')
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        server.stop()
    assert running is not None, "no lag series while the worker ran"
    assert down == 0.0
    assert len(after) >= 3 and after[-1] > after[0] and after == sorted(after), after


async def _produce_values(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        for v in values:
            await producer.send(topic, v, key=b"h")
        await producer.flush()
