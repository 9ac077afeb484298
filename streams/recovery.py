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
"""

from __future__ import annotations

from typing import Any

from faust.tables import TableManager
from faust.tables.recovery import Recovery


def hold_flow(app: Any) -> None:
    """Stop handing fetched records to the agents until the flow is resumed."""
    app.consumer.stop_flow()
    app.flow_control.suspend()


class SeekFirstRecovery(Recovery):
    """faust's recovery, with no source record flowing before the seek (module doc)."""

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        hold_flow(self.app)
        await super().on_recovery_completed(generation_id)


class SeekFirstTableManager(TableManager):
    """The table manager of the worker's app: recovers with :class:`SeekFirstRecovery`
    (faust's ``TableManager`` setting)."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = SeekFirstRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery
