"""Faust's fetcher never loses a record it has read from Kafka but does not hand over.

faust asks the consumer's thread for the records of the partitions that are *active*
(assigned and not paused), and it passes the set itself: the one the main thread goes on
changing. A request may wait up to a second. If a rebalance pauses every partition while
it waits, the set is empty by the time records arrive, and aiokafka reads an empty set as
"every partition": the reply then holds records the main thread does not want, such as
those of a changelog partition that a table restore has just positioned. faust drops
records it does not want, yet aiokafka's position has moved past them, and nothing seeks
a changelog partition back (faust seeks only the source partitions, to their committed
offsets). The restore then waits for records that never come, and the worker never
finishes recovering. It was seen after a worker joined a group and another one left.

:class:`FetchGuardConsumer` asks with a copy of the set as it is when the request is made,
and seeks each partition whose records it will not hand over back to the first of them,
so that a later request reads them again.

Example:
    >>> from types import SimpleNamespace as Record
    >>> split_unwanted({"t-0": [Record(offset=5), Record(offset=6)]}, lambda tp: False)
    ({}, {'t-0': 5})
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from faust.transport.drivers.aiokafka import Consumer
from faust.types import TP

log = logging.getLogger(__name__)


def split_unwanted(
    records: Mapping[Any, list[Any]], wanted: Callable[[Any], bool]
) -> tuple[dict[Any, list[Any]], dict[Any, int]]:
    """The records of the wanted partitions, and for every other partition the offset
    of its first record (where to seek it back)."""
    kept = {tp: batch for tp, batch in records.items() if wanted(tp)}
    unwanted = {tp: batch[0].offset for tp, batch in records.items() if batch and tp not in kept}
    return kept, unwanted


class FetchGuardConsumer(Consumer):
    """faust's aiokafka consumer whose fetches lose no record (module doc)."""

    async def _getmany(
        self,
        active_partitions: set[TP] | None,
        timeout: float,  # noqa: ASYNC109 - faust's signature
    ) -> Any:
        asked = None if active_partitions is None else set(active_partitions)
        records = await super()._getmany(asked, timeout)
        while True:  # checked again after every await: the flow may stop meanwhile
            records, unwanted = split_unwanted(
                records, lambda tp: self._hands_over(tp, active_partitions)
            )
            if not unwanted:
                return records
            log.info("fetched records not handed over, partitions sought back: %s", unwanted)
            await self._thread.call_thread(self._seek_back, unwanted)

    def _hands_over(self, tp: Any, active_partitions: set[TP] | None) -> bool:
        """Whether faust's ``getmany`` hands ``tp``'s records over now: while the flow is
        on, for a partition in the live set of active ones or a buffered one."""
        return self.flow_active and (
            active_partitions is None or tp in active_partitions or tp in self._buffered_partitions
        )

    async def _seek_back(self, offsets: Mapping[Any, int]) -> None:
        """Seek each partition still assigned to its offset (on the consumer's thread)."""
        consumer = self._thread._ensure_consumer()
        assigned = consumer.assignment()
        for tp, offset in offsets.items():
            if tp in assigned:
                consumer.seek(tp, offset)
