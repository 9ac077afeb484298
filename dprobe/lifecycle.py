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

from typing import Self


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
