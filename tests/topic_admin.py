"""Make topics on a real broker as a user or another tool would, outside dprobe, for the
tests of what dprobe does with topics it finds.

>>> import asyncio
>>> asyncio.run(create_topics("127.0.0.1:9092", {"t.samples": (1, {})}))  # doctest: +SKIP
"""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def create_topics(bootstrap: str, topics: dict[str, tuple[int, dict[str, str]]]) -> None:
    """Create each topic with its (partitions, configs), replication factor 1."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(t, n, 1, topic_configs=c) for t, (n, c) in topics.items()]
        )
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, prefix: str) -> None:
    """Delete every topic whose name starts with ``prefix``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([t for t in await admin.list_topics() if t.startswith(prefix)])
    finally:
        await admin.close()
