"""Futures nobody awaits any more (a read that timed out, the deliveries after the first
failure): their outcome is retrieved, so asyncio does not log each failure as "Future
exception was never retrieved" when they are collected.

Example:
    >>> import asyncio
    >>> async def main() -> None:
    ...     failed = asyncio.get_running_loop().create_future()
    ...     failed.set_exception(OSError("Kafka gone"))
    ...     pending = asyncio.get_running_loop().create_future()
    ...     read_failures([failed, pending])  # pending: read once it fails
    ...     pending.set_exception(OSError("Kafka gone"))
    ...     await asyncio.sleep(0)
    >>> asyncio.run(main())  # nothing logged when they are collected
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


def read_failure(fut: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of a done ``fut`` (usable as a done callback)."""
    if not fut.cancelled():
        fut.exception()


def read_failures(futures: Iterable[Any]) -> None:
    """:func:`read_failure` for each asyncio future of ``futures``: now if it is done,
    else when it is (anything else, such as a coroutine, is left alone)."""
    for fut in futures:
        if not isinstance(fut, asyncio.Future):
            continue
        if fut.done():
            read_failure(fut)
        else:
            fut.add_done_callback(read_failure)
