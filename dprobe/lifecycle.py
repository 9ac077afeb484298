"""``async with`` for components with an explicit lifecycle, written once.

Example:
    >>> import asyncio
    >>> class Pump(AsyncService):
    ...     async def start(self) -> None: print("start")
    ...     async def stop(self) -> None: print("stop")
    >>> async def main() -> None:
    ...     async with Pump():
    ...         print("work")
    >>> asyncio.run(main())
    start
    work
    stop
"""

from __future__ import annotations

import asyncio
from typing import Any, Self


class AsyncService:
    """Base of services with ``start()`` / idempotent ``stop()``: ``async with`` runs both."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class AsyncResource:
    """Base of resources with ``open()`` / ``close()``: ``async with`` runs both."""

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def cancel_and_wait(task: asyncio.Task[Any], retry_s: float = 1.0) -> None:
    """Cancel ``task`` until it has ended; re-raise the error that ended it, if any.

    One ``cancel()`` can be lost: ``asyncio.wait_for`` in Python 3.11 returns the inner
    result when that and the cancellation land in the same turn, and client libraries
    sometimes swallow one. Awaiting the task once would then hang a stopping service for
    good, so the cancellation is repeated every ``retry_s`` until the task is done.

    Example:
        >>> async def main() -> bool:
        ...     task = asyncio.create_task(asyncio.sleep(60))
        ...     await cancel_and_wait(task)
        ...     return task.cancelled()
        >>> asyncio.run(main())
        True
    """
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=retry_s)
    failure = None if task.cancelled() else task.exception()
    if failure is not None:
        raise failure
