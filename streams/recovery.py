"""Table recovery that seeks the source partitions before any of their records flows.

After the tables are rebuilt from their changelogs (every start, every rebalance), faust's
``Recovery.on_recovery_completed`` resumes the source partitions (``dprobe.samples``, the
tenant-updates and planning topics), *then* awaits the seek to their committed offsets,
*then* resumes the flow, which clears the agents' input queues. The flow is already on
at that point (the changelogs were read with it on), so while the seek is awaited the
fetcher hands the agents whatever the consumer had fetched, from wherever its position
was. Seen after a SIGTERM and restart under traffic:

- records still queued when the flow resumes are thrown away yet counted as read (the
  fetcher goes on with the batch it fetched before the seek, so the refetch from the
  committed offset drops them), and faust commits over a single missing offset (it only
  stops at a hole of two or more): a snapshot lost for good, its host's next one counted
  ``lost=1``, the last record read before the seek read again (``duplicate``);
- the records handed over can start past the committed offset (at the log's end): the
  ingest stage moves a host's sequence state past the snapshots in between, which the
  refetch then drops as duplicates, and the watermarks jump, so those windows are never
  emitted at all.

The same holds for the window stage's partials and watermarks. Here the consumer's flow
is stopped (as faust itself does when partitions are revoked) before faust's own
completion step runs, so no source record is fetched or queued until the partitions sit
at their committed offsets; faust's step then resumes the flow.

A restore also never waits forever. faust waits until every changelog partition it
restores has reached its end; if records of one were read from Kafka but never handed
over (``streams/fetch_guard.py`` closes the one way seen), nothing would ever read them
again. An active changelog partition that has given the restore nothing for
:attr:`SeekFirstRecovery.stall_s` while records remain is sought back to where the
restore stands, with a warning; records read twice are skipped by offset, as faust does.
"""

from __future__ import annotations

import logging
from time import monotonic
from typing import Any

from aiokafka.errors import KafkaError
from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.types import TP
from mode import Service

log = logging.getLogger(__name__)


def hold_flow(app: Any) -> None:
    """Stop handing fetched records to the agents until the flow is resumed."""
    app.consumer.stop_flow()
    app.flow_control.suspend()


class SeekFirstRecovery(Recovery):
    """faust's recovery, with no source record flowing before the seek, and no restore
    waiting forever for records that were read but lost (module doc)."""

    #: seconds an active changelog partition with records left may give the restore
    #: nothing before it is sought back (faust warns after 30 s of the same)
    stall_s: float = 30.0
    _sought_back_at: dict[TP, float]

    def __post_init__(self) -> None:
        super().__post_init__()
        self._sought_back_at = {}

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        hold_flow(self.app)
        await super().on_recovery_completed(generation_id)

    @Service.timer(5.0)
    async def _seek_back_stalled_timer(self) -> None:
        await self.seek_back_stalled(monotonic())

    async def seek_back_stalled(self, now: float) -> dict[TP, int]:
        """Seek each stalled changelog partition of the running restore back to the
        last offset it applied (0 when none); the offsets sought."""
        started = self._recovery_started_at
        if not self.in_recovery or started is None:
            return {}
        stalled = {
            tp: max(self.active_offsets[tp], 0)
            for tp, left in self.active_remaining().items()
            if left > 0 and now - self._last_heard_of(tp, started) >= self.stall_s
        }
        if stalled:
            log.warning("restore stalled, changelog partitions sought back: %s", stalled)
            self._sought_back_at.update(dict.fromkeys(stalled, now))
            try:
                await self.app.consumer.seek_wait(stalled)
            except (KafkaError, TimeoutError) as exc:  # a rebalance took them meanwhile
                log.warning("seeking back the stalled restore failed: %r", exc)
        return stalled

    def _last_heard_of(self, tp: TP, started: float) -> float:
        """When the restore that began at ``started`` last heard of ``tp``: its last
        event, its last seek back, or the start."""
        return max(
            started,
            self._active_events_received_at.get(tp, started),
            self._sought_back_at.get(tp, started),
        )


class SeekFirstTableManager(TableManager):
    """The table manager of the worker's app: recovers with :class:`SeekFirstRecovery`
    (faust's ``TableManager`` setting)."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = SeekFirstRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery
