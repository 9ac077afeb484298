"""Create the samples topic before the collector's first record, if it is missing.

A broker that creates topics on demand would make ``dprobe.samples`` at the collector's
first send with its own defaults, often one partition, and no worker could then scale out
past one. So the collector creates it first, as the worker and ``dprobe topics create``
would (:attr:`NewTopicSpec.partitions`, broker time on records). An existing topic is
left as it is. Where the collector's user may not create topics (ACLs), it says so once
and goes on: the topic is then whoever's creates it. Where Kafka did not answer in time
(a hung broker, a controller not ready yet), :class:`TopicNotCreatedYet` is raised: the
sender then sends nothing, so no broker creates the topic on demand, and tries again.
A topic it created is used once each partition's leader answers for it (a moment
later), so that the first snapshots are not retried with a warning each.

Example:
    >>> NewTopicSpec(partitions=4).configs
    {'message.timestamp.type': 'LogAppendTime'}
    >>> import asyncio
    >>> spec = NewTopicSpec(partitions=4)
    >>> asyncio.run(ensure_topic(KafkaSettings(), "dprobe.samples", spec))  # doctest: +SKIP
    'created'
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    InvalidReplicationFactorError,
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    for_code,
)

from dprobe import topic_configs
from dprobe.config import KafkaSettings
from dprobe.errors import reason
from dprobe.topic_create import TopicCreateError, create_topics

log = logging.getLogger(__name__)

# refusals that pass by themselves besides those Kafka marks retriable: a replication factor
# above the brokers registered now (one restarting: the collector's setting is the
# cluster's, and a broker that creates the topic on demand instead would give it its own
# layout)
_PASSING_CODES = frozenset({InvalidReplicationFactorError.errno})


class TopicNotCreatedYet(Exception):
    """The topic could not be created yet (the reason in the message); ``missing``: Kafka
    said it does not exist (else it did not answer that far)."""

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class NewTopicSpec:
    """How to create the topic when it is missing."""

    partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=lambda: dict(topic_configs.SAMPLES))


async def ensure_topic(
    kafka: KafkaSettings, topic: str, spec: NewTopicSpec, *, timeout_s: float = 15.0
) -> str:
    """Create ``topic`` per ``spec`` unless it exists; ``"created"``, ``"exists"`` or
    ``"failed"`` (refused for good: logged, with what to do; the collector goes on).

    Raises :class:`TopicNotCreatedYet` when Kafka did not answer in time or refused for a
    reason that passes by itself: the caller tries again later."""
    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    missing = False
    try:
        async with asyncio.timeout(timeout_s):
            await admin.start()
            # metadata of all topics: asking for the named one could auto-create it
            if topic in set(await admin.list_topics()):
                return "exists"
            missing = True
            new = NewTopic(
                topic, spec.partitions, spec.replication_factor, topic_configs=spec.configs
            )
            await create_topics(admin, [new])  # one that exists: another client was first
    except TopicAlreadyExistsError:
        return "exists"  # another collector or the worker was first
    except (KafkaError, OSError, TimeoutError, TopicCreateError) as exc:
        if passes(exc):
            said = f"no answer within {timeout_s:g} s" if type(exc) is TimeoutError else reason(exc)
            raise TopicNotCreatedYet(said, missing=missing) from exc
        log.warning(
            "could not create topic %s (%s): the broker may create it with its own "
            "defaults at the first snapshot; create it with `dprobe topics create`",
            topic, reason(exc),
        )  # fmt: skip
        return "failed"
    finally:
        await admin.close()
    log.info("created topic %s with %d partition(s)", topic, spec.partitions)
    await _until_served(kafka, topic, spec.partitions, timeout_s=timeout_s)
    return "created"


def passes(exc: BaseException) -> bool:
    """True for a failure to create a topic that may pass by itself: no answer in time,
    no connection, an error Kafka marks retriable, or fewer brokers up than the
    replication factor (a broker restarting; not an ACL or another bad setting).

    >>> from aiokafka.errors import TopicAuthorizationFailedError
    >>> passes(TimeoutError()), passes(TopicAuthorizationFailedError())
    (True, False)
    >>> passes(TopicCreateError("...", codes=frozenset({InvalidReplicationFactorError.errno})))
    True
    """
    if isinstance(exc, TimeoutError | OSError | KafkaTimeoutError):
        return True
    if isinstance(exc, TopicCreateError) and exc.codes:
        return all(c in _PASSING_CODES or for_code(c).retriable for c in exc.codes)
    return bool(getattr(exc, "retriable", False))


async def _until_served(
    kafka: KafkaSettings, topic: str, partitions: int, *, timeout_s: float
) -> None:
    """Wait, at most ``timeout_s``, until the leader of each of ``topic``'s partitions
    answers for it (their end offsets are read). A send to a partition not served yet is
    retried by the client, with a NotLeaderForPartition warning; waiting is all it costs
    where that cannot be asked, so a failure here is only logged."""
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    try:
        async with asyncio.timeout(timeout_s):
            await consumer.start()
            await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    except (KafkaError, OSError, TimeoutError) as exc:
        log.debug("topic %s: partition leaders not confirmed (%s)", topic, exc)
    finally:
        await consumer.stop()
