"""The worker's dead-letter sender: every record it cannot process, with the reason.

Invalid input (a :class:`~dprobe.schema.SchemaError`) and unexpected failures while
processing one record (:class:`ProcessingError`, a bug, never a stalled partition) both
go to ``dprobe.deadletter`` as a :class:`~dprobe.schema.DeadLetter` naming the source
topic, partition and offset, keyed ``topic:partition:offset``.

Example:
    >>> from types import SimpleNamespace as M
    >>> where(M(topic="dprobe.samples", partition=2, offset=41))
    'dprobe.samples[2]@41'
"""

from __future__ import annotations

import logging
import time
from typing import Any

from dprobe import schema
from dprobe.errors import DprobeError
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams.delivery import delivered

log = logging.getLogger(__name__)


class ProcessingError(DprobeError):
    """An unexpected failure while processing one record (a bug, not bad input)."""

    reason = "processing_error"


def where(message: Any) -> str:
    """``topic[partition]@offset`` of a faust message, for logs."""
    return f"{message.topic}[{message.partition}]@{message.offset}"


class DeadLetters:
    """Sends records that cannot be processed to the dead-letter topic and counts them."""

    def __init__(self, topic: Any, stats: WorkerStats) -> None:
        self.topic = topic
        self.stats = stats

    async def send(
        self, raw: bytes | None, error: Exception, message: Any, *, wait: bool = True
    ) -> Any:
        """Send the invalid record with its reason (the stream keeps going) and wait for its
        delivery (:class:`~dprobe.streams.delivery.DeliveryFailed` if it fails: the record
        must not be acknowledged); with ``wait=False``, return the delivery future for the
        caller to await before the record may be acknowledged."""
        dl = schema.dead_letter(
            raw if isinstance(raw, (bytes, bytearray)) else None,
            error,
            source_topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            ts=time.time(),
        )
        self.stats.dead_letter(dl.reason)
        key = f"{message.topic}:{message.partition}:{message.offset}".encode()
        fut = await self.topic.send(key=key, value=schema.encode(dl))
        if not wait:
            return fut
        await delivered([fut], f"dead letter of {where(message)}")
        return None

    async def processing_error(
        self, raw: bytes | None, exc: Exception, message: Any, *, wait: bool = True
    ) -> Any:
        """Log an unexpected failure on one record (with its traceback) and send the record
        with reason ``processing_error``: a bug never stalls the partition (``wait`` as
        for :meth:`send`)."""
        log.error("processing %s failed", where(message), exc_info=exc)
        return await self.send(raw, ProcessingError(repr(exc)), message, wait=wait)
