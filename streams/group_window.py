"""Refuse to join running workers of the same app id that use another window length.

Workers of one app id split the samples partitions between them; one that windows with
another length would write overlapping windows of its own length beside theirs, and each
side would drop the other's data as late. A worker that joins a group whose members are
running therefore reads the newest window on the group's planning topic (every worker
forwards its windows there) and exits 2 when that window has another length. A group
with no running member is not checked: stopping every worker and starting them with a
new ``window_s`` is how the length is changed (each tenant's history restarts).

Example (in the worker's start, with an admin client that is connected)::

    await check_group_window(admin, settings, "dprobe-worker-planning")
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from dprobe.config import WorkerSettings
from dprobe.errors import UsageError
from dprobe.schema import TenantWindow
from dprobe.sinks.consumer_lag import group_members
from dprobe.streams import codec

log = logging.getLogger(__name__)

# records read back from the end of the planning topic to find the newest window (a
# planning topic holds windows, window-progress marks and cluster reports)
LOOK_BACK = 500
READ_TIMEOUT_S = 10.0


class WindowLengthMismatchError(UsageError):
    """Running workers of the app id window with another length than this one."""


async def check_group_window(admin: Any, s: WorkerSettings, planning_topic: str) -> None:
    """Raise :class:`WindowLengthMismatchError` when workers of ``s.app_id`` run and the
    newest window they forwarded to ``planning_topic`` is not ``s.window_s`` long.
    Nothing is checked when the group cannot be described or its topic read."""
    try:
        members = await group_members(admin, s.app_id)
        if not members:
            return
        running = await newest_window_length(s, planning_topic)
    except (KafkaError, OSError, TimeoutError) as exc:
        log.debug("window length of group %s not checked: %r", s.app_id, exc)
        return
    if running is None or math.isclose(running, s.window_s, rel_tol=1e-9, abs_tol=1e-6):
        return
    raise WindowLengthMismatchError(
        f"the {members} running worker(s) of app id {s.app_id!r} make {running:g}-s windows "
        f"(the newest on {planning_topic}), this one {s.window_s:g}-s windows: one group "
        f"with two lengths writes overlapping windows and drops data as late. Start it "
        f"with --window {running:g}, or stop every worker of the group to change the length "
        f"(a killed worker counts as running for session_timeout_s, {s.session_timeout_s:g} s)"
    )


async def newest_window_length(s: WorkerSettings, planning_topic: str) -> float | None:
    """Length in seconds of the newest TenantWindow on ``planning_topic`` (one partition,
    which exists), among its last :data:`LOOK_BACK` records; ``None`` when there is none."""
    consumer = AIOKafkaConsumer(**s.kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(planning_topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        if end == 0:
            return None
        consumer.seek(tp, max(0, end - LOOK_BACK))
        newest: TenantWindow | None = None
        deadline = time.monotonic() + READ_TIMEOUT_S
        while await consumer.position(tp) < end and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500)
            for record in batch.get(tp, []):
                if record.offset >= end:
                    break
                try:
                    message = codec.decode_planning(record.value or b"")
                except Exception:  # noqa: BLE001 - a record this check cannot read is skipped
                    continue
                if isinstance(message, TenantWindow):
                    newest = message
        return None if newest is None else newest.window_end - newest.window_start
    finally:
        await consumer.stop()
