"""faust's stall checks count from the last rebalance, not from the worker's start.

Every ``stream_processing_timeout`` faust checks each assigned partition and logs an
ERROR when, among other things, its stream "has not started processing" it: the
partition has records to read and no event of it has reached a stream yet. It measures
"yet" from the moment the consumer started. A partition that a rebalance hands to a
worker that has run longer than the timeout is therefore reported at once, before its
first fetch, although nothing stalls (seen when a second worker joined: the partitions
that moved were processed at once, and each got an ERROR line). Alerts on ERROR lines
then fire on every rebalance.

:class:`StallClockConsumer` restarts that clock whenever partitions are assigned, so each
check means "since this worker got the partition" (every rebalance assigns every
partition anew). The other checks that count from the start (no fetch, no high-water
mark, no commit since start) then count from the last rebalance too.

Example:
    >>> import asyncio
    >>> class Base:
    ...     async def on_partitions_assigned(self, assigned, generation_id=0):
    ...         self.assigned = assigned
    >>> class Demo(StallClockConsumer, Base): ...
    >>> c = Demo(); c._thread = type("Thread", (), {"time_started": 0.0})()
    >>> asyncio.run(c.on_partitions_assigned({"t-0"}))
    >>> c._thread.time_started > 0.0, c.assigned
    (True, {'t-0'})
"""

from __future__ import annotations

import time
from typing import Any


class StallClockConsumer:
    """Mixin for faust's aiokafka consumer: the stall clock restarts at each assignment."""

    _thread: Any

    async def on_partitions_assigned(self, assigned: Any, generation_id: int = 0) -> None:
        thread = getattr(self, "_thread", None)
        if thread is not None and hasattr(thread, "time_started"):
            thread.time_started = time.monotonic()  # faust's clock (monotonic) in its thread
        await super().on_partitions_assigned(assigned, generation_id)  # type: ignore[misc]
