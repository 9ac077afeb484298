"""Stop an aiokafka consumer within a bound, also when Kafka has gone away.

``AIOKafkaConsumer.stop()`` leaves the group and closes its fetches, and both wait on the
broker: a consumer stopped while Kafka is unreachable may wait for a long time, or end in
the ``CancelledError`` of its own fetch task (aiokafka re-raises the cancel of a fetch
that waits to retry). :func:`stop_consumer` gives the stop ``timeout_s``; past it, or in
that case, it ends the consumer's fetcher and group tasks and closes its connections
without a clean leave, so that nothing of it goes on in a process that lives on. A
cancellation of the calling task itself still propagates.

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
    await _end_background(consumer)
    await consumer._client.close()  # what stop() would close last
    return False


# The consumer's tasks that stop() would have ended: left running, the fetcher retries the
# broker (and logs each failure) for as long as the process runs.
_BACKGROUND = {
    "_fetcher": ("_fetch_task",),
    "_coordinator": (
        "_coordination_task",
        "_heartbeat_task",
        "_commit_refresh_task",
        "_reset_committed_task",
    ),
}
# How long the cancelled tasks may take to end (they end at their next await).
_CANCEL_WAIT_S = 2.0


async def _end_background(consumer: Any) -> None:
    """Cancel the fetcher's and the group coordinator's tasks of a ``consumer`` whose stop
    was given up on, and wait (briefly) for them to end."""
    tasks: list[asyncio.Future[Any]] = []
    for part, names in _BACKGROUND.items():
        owner = getattr(consumer, part, None)
        tasks += [t for n in names if isinstance(t := getattr(owner, n, None), asyncio.Future)]
    fetcher = getattr(consumer, "_fetcher", None)
    tasks += list(getattr(fetcher, "_pending_tasks", ()))
    running = [t for t in tasks if not t.done()]
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(running, timeout=_CANCEL_WAIT_S)


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
