"""Shared fixtures: a real Kafka broker for the session, unique topics per test.

``kafka_bootstrap`` yields a bootstrap address, from the first source that works:
1. ``KAFKA_BOOTSTRAP`` if set (a broker you run yourself);
2. a testcontainers Kafka when a Docker engine answers;
3. the project's own local broker (infra/kafka, Java 17 + Maven), started on free ports
   in a temporary state dir and stopped at the end of the session.

``kafka`` gives per-test helpers: ``await kafka.create_topic("samples", partitions=4)``
returns a unique, freshly created topic name.

Tiers: a test that asks for the broker is marked ``integration`` and one that asks for the
public traces ``traces``, here at collection, so no test can reach either unmarked.
``make test-fast`` runs what is left without ``slow`` and ``gpu``; ``make test`` runs all.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dprobe.broker import LocalBroker
from dprobe.config import BrokerSettings, KafkaSettings, Secret

# Fixture -> the marker every test that uses it (directly or through another fixture) gets.
MARK_BY_FIXTURE = {
    "kafka_bootstrap": "integration",
    "sasl_kafka": "integration",
    "trace_dir": "traces",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, marker in MARK_BY_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _docker_answers() -> bool:
    """True when a Docker engine answers a ping (testcontainers can then run Kafka)."""
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    try:
        import docker

        client = docker.from_env(timeout=3)
    except Exception:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a real Kafka broker for the whole test session."""
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield os.environ["KAFKA_BOOTSTRAP"]
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.1.1").with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    state = tmp_path_factory.mktemp("broker")
    settings = BrokerSettings(
        port=_free_port(), controller_port=_free_port(), state_dir=Path(state)
    )
    broker = LocalBroker(settings)
    t0 = time.monotonic()
    broker.start()
    print(f"\nlocal Kafka broker ready at {broker.bootstrap} in {time.monotonic() - t0:.1f}s")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSettings]:
    """Client settings of a second local broker whose client port speaks SASL_PLAINTEXT
    with SCRAM-SHA-512 (one user, ``dprobe``), for the whole session."""
    password = uuid.uuid4().hex
    settings = BrokerSettings(
        port=_free_port(),
        controller_port=_free_port(),
        state_dir=Path(tmp_path_factory.mktemp("sasl-broker")),
        sasl_user="dprobe",
        sasl_password=Secret(password),
    )
    broker = LocalBroker(settings)
    t0 = time.monotonic()
    broker.start()
    print(f"\nlocal SASL Kafka broker ready at {broker.bootstrap} in {time.monotonic() - t0:.1f}s")
    try:
        yield KafkaSettings(
            bootstrap=broker.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="dprobe",
            sasl_password=Secret(password),
        )
    finally:
        broker.stop()


class KafkaHelper:
    """Per-test access to the session broker: unique topics, client settings."""

    def __init__(self, bootstrap: str, test_name: str) -> None:
        self.bootstrap = bootstrap
        self.settings = KafkaSettings(bootstrap=bootstrap)
        self._prefix = "".join(c if c.isalnum() else "-" for c in test_name)[:40]
        self.created: list[str] = []

    def unique(self, name: str) -> str:
        """A topic name no other test uses: ``test-<test>-<name>-<8 hex>``."""
        return f"test-{self._prefix}-{name}-{uuid.uuid4().hex[:8]}"

    async def create_topic(self, name: str, partitions: int = 1, **config: str) -> str:
        """Create a unique topic and return its name (waits until the broker has it)."""
        return await self.create_named(self.unique(name), partitions, **config)

    async def create_named(self, topic: str, partitions: int = 1, **config: str) -> str:
        """Create ``topic`` as named (e.g. ``<unique prefix>cluster``), deleted after the
        test; returns its name."""
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [
                    NewTopic(
                        topic, num_partitions=partitions, replication_factor=1, topic_configs=config
                    )
                ]
            )
        finally:
            await admin.close()
        self.created.append(topic)
        return topic


@pytest.fixture
async def kafka(kafka_bootstrap: str, request: pytest.FixtureRequest) -> AsyncIterator[KafkaHelper]:
    helper = KafkaHelper(kafka_bootstrap, request.node.name)
    yield helper
    if helper.created:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        with contextlib.suppress(Exception):
            await admin.delete_topics(helper.created)
        await admin.close()


@pytest.fixture(scope="session")
def trace_dir() -> Path:
    """The public traces folder (``DPROBE_TRACE_DIR``); tests that need it skip without it."""
    value = os.environ.get("DPROBE_TRACE_DIR")
    if not value or not Path(value).is_dir():
        pytest.skip("DPROBE_TRACE_DIR is not set: the public traces are not available")
    return Path(value)
