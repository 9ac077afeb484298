"""Create the worker's topics when they are missing, and read their layout.

Example:
    >>> import asyncio
    >>> from dprobe.config import WorkerSettings
    >>> asyncio.run(ensure_topics(WorkerSettings()))  # doctest: +SKIP
    {'dprobe.samples': 4, 'dprobe.jobs': 4, ...}
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError
from dprobe.streams.topics import TopicNames

from dprobe.config import WorkerSettings
from dprobe.errors import DprobeError

log = logging.getLogger(__name__)


class BrokerUnreachableError(DprobeError):
    retriable = True


async def ensure_topics(s: WorkerSettings, *, attempts: int = 30) -> dict[str, int]:
    """Create missing external topics with ``s.partitions``; return partitions per topic."""
    names = TopicNames.from_settings(s)
    admin = AIOKafkaAdminClient(**s.kafka.client_kwargs())
    for attempt in range(attempts):
        try:
            await admin.start()
            break
        except KafkaConnectionError as exc:
            if attempt == attempts - 1:
                raise BrokerUnreachableError(
                    f"Kafka at {s.kafka.bootstrap} is unreachable: {exc}"
                ) from exc
            await asyncio.sleep(min(0.5 * 2**attempt, 5.0))
    try:
        existing = set(await admin.list_topics())
        # The internal updates topic is created here too: a consumer group that starts
        # before its topic exists is never assigned its partitions.
        missing = [t for t in (*names.external(), names.updates) if t not in existing]
        if missing:
            log.info("creating topics %s with %d partitions", missing, s.partitions)
            with contextlib.suppress(TopicAlreadyExistsError):  # another worker won the race
                await admin.create_topics(
                    [NewTopic(t, s.partitions, s.replication_factor) for t in missing]
                )
        described = await admin.describe_topics(list(names.external()))
        return {d["topic"]: len(d["partitions"]) for d in described}
    finally:
        await admin.close()
