"""Waiting for sends to be delivered before a record may be acknowledged.

faust acknowledges a record when its handler returns and, at commit, only logs a send
that failed: a record whose output was lost would be committed all the same. Every
stage therefore waits for its outputs (dead letters included) before it returns, and
turns a failed delivery into :class:`DeliveryFailed`, on which the worker exits without
committing (a supervisor restarts it from its last commit).

Example:
    >>> import asyncio
    >>> async def lost() -> None:
    ...     fut = asyncio.get_running_loop().create_future()
    ...     fut.set_exception(TimeoutError("broker away"))
    ...     await delivered([fut], "job event of vc-a")
    >>> asyncio.run(lost())
    Traceback (most recent call last):
    ...
    dprobe.streams.delivery.DeliveryFailed: job event of vc-a not delivered
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


class DeliveryFailed(Exception):
    """An output of a record was not delivered: the record must not be acknowledged (the
    worker exits instead)."""


async def delivered(futures: Iterable[Any], what: str) -> None:
    """Wait for every delivery future of ``futures`` (``None`` entries are skipped); a
    failed one raises :class:`DeliveryFailed` naming ``what``."""
    for fut in futures:
        if fut is None:
            continue
        try:
            await fut
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise DeliveryFailed(f"{what} not delivered") from exc
