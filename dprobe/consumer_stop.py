"""Stop an aiokafka consumer within a bound, also when Kafka has gone away.

``AIOKafkaConsumer.stop()`` leaves the group and closes its fetches, and both wait on the
broker: a consumer stopped while Kafka is unreachable may wait for a long time, or end in
the ``CancelledError`` of its own fetch task (aiokafka re-raises the cancel of a fetch
that waits to retry). :func:`stop_consumer` gives the stop ``timeout_s``; past it, or in
that case, it closes the consumer's connections without a clean leave. A cancellation of
the calling task itself still propagates.

Example:
    >>> import asyncio
    >>> class Hung:  # a consumer whose stop waits for a broker that is gone
    ...     closed = False
    ...     async def stop(self): await asyncio.Event().wait()
    ...     class _client:
    ...         async def close(): Hung.closed = True
    >>> asyncio.run(stop_consumer(Hung(), 0.01)), Hung.closed
    (False, True)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


async def stop_consumer(consumer: Any, timeout_s: float | None = None) -> bool:
    """Stop ``consumer`` (``timeout_s`` ``None``: as long as its stop takes); ``True``
    when it stopped cleanly, ``False`` when its connections were closed instead."""
    try:
        await asyncio.wait_for(consumer.stop(), timeout_s)
        return True
    except TimeoutError:
        pass
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    await consumer._client.close()  # what stop() would close last
    return False


def abandon(tasks: set[asyncio.Task[Any]]) -> None:
    """Let ``tasks``, given up on, end without asyncio logging their failure as a "Task
    exception was never retrieved" traceback: aiokafka runs a commit in a shielded task
    that a timeout leaves running, and closing the consumer's connections fails it. The
    caller has logged what giving up means."""
    for task in tasks:
        task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("abandoned %s ended: %r", task.get_name(), task.exception())
