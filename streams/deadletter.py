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

    async def send(self, raw: bytes | None, error: Exception, message: Any) -> None:
        """Send the invalid record with its reason (the stream keeps going)."""
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
        await self.topic.send(key=key, value=schema.encode(dl))

    async def processing_error(self, raw: bytes | None, exc: Exception, message: Any) -> None:
        """Log an unexpected failure on one record (with its traceback) and send the record
        with reason ``processing_error``: a bug never stalls the partition."""
        log.error("processing %s failed", where(message), exc_info=exc)
        await self.send(raw, ProcessingError(repr(exc)), message)
