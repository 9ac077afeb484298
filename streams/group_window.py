"""Refuse to join running workers of the same app id that use another window length.

Workers of one app id split the samples partitions between them; one that windows with
another length would write overlapping windows of its own length beside theirs, and each
side would drop the other's data as late. A worker that joins a group whose members are
running therefore reads the group's planning topic back to the newest record that says a
length: a window (every worker forwards its windows there) or the mark a worker leaves
when it joins (:class:`~dprobe.streams.codec.WorkerStarted`), and exits 2 when that
length is another. A group with no running member is not checked: stopping every worker
and starting them with a new ``window_s`` is how the length is changed (each tenant's
history restarts); the first of them leaves its mark, so the others, started before it
has closed a window of the new length, are checked against the new length, not the old
windows.

Example (in the worker's start, with an admin client that is connected)::

    await check_group_window(admin, settings, "dprobe-worker-planning")
    await announce_window(settings, "dprobe-worker-planning")
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
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


async def check_group_window(admin: Any, s: WorkerSettings, planning_topic: str) -> bool:
    """Raise :class:`WindowLengthMismatchError` when workers of ``s.app_id`` run and the
    newest length on ``planning_topic`` is not ``s.window_s``. Nothing is checked when the
    group cannot be described or its topic read. ``True`` when no worker of the group
    runs: this one then sets the length, and marks it (:func:`announce_window`)."""
    try:
        members = await group_members(admin, s.app_id)
        if not members:
            return True
        running = await newest_window_length(s, planning_topic)
    except (KafkaError, OSError, TimeoutError) as exc:
        log.debug("window length of group %s not checked: %r", s.app_id, exc)
        return False
    if running is None or math.isclose(running, s.window_s, rel_tol=1e-9, abs_tol=1e-6):
        return False
    raise WindowLengthMismatchError(
        f"the {members} running worker(s) of app id {s.app_id!r} make {running:.10g}-s "
        f"windows (the newest length on {planning_topic}), this one {s.window_s:.10g}-s "
        f"windows: one group with two lengths writes overlapping windows and drops data as "
        f"late. Start it with --window {running:.10g}, or stop every worker of the group to "
        f"change the length (a killed worker counts as running for session_timeout_s, "
        f"{s.session_timeout_s:g} s)"
    )


async def announce_window(s: WorkerSettings, planning_topic: str) -> None:
    """Leave a :class:`~dprobe.streams.codec.WorkerStarted` mark with ``s.window_s`` on
    ``planning_topic`` (which exists), for the workers that join after this one. A mark
    that cannot be written is logged, not raised."""
    producer = AIOKafkaProducer(**s.kafka.client_kwargs(), acks="all")
    mark = codec.WorkerStarted(window_s=s.window_s, at=time.time())
    try:
        await producer.start()
        await producer.send_and_wait(planning_topic, codec.encode_started(mark), key=b"plan")
    except (KafkaError, OSError) as exc:  # the worker runs on; a later one may be misjudged
        log.warning("could not mark this worker's window length on %s: %r", planning_topic, exc)
    finally:
        await producer.stop()


async def newest_window_length(s: WorkerSettings, planning_topic: str) -> float | None:
    """The window length in seconds the newest TenantWindow or WorkerStarted mark on
    ``planning_topic`` (one partition, which exists) says, among its last
    :data:`LOOK_BACK` records; ``None`` when there is neither."""
    consumer = AIOKafkaConsumer(**s.kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(planning_topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        if end == 0:
            return None
        consumer.seek(tp, max(0, end - LOOK_BACK))
        newest: float | None = None
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
                    newest = message.window_end - message.window_start
                elif isinstance(message, codec.WorkerStarted):
                    newest = message.window_s
        return newest
    finally:
        await consumer.stop()
