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
windows. Workers that start an empty group at the same moment each find no member
running and each leave a mark: a mark less than :data:`START_GRACE_S` apart (by the
writers' clocks) from the newest mark that held, with no window between them, and with
another length, loses; a worker whose own mark lost exits 2 right after writing it, and
later checks skip it. So the first length holds among workers that start together.

The other settings that shape a window (:data:`WINDOW_SHAPE`: ``grace_s``, the level
thresholds and weights, how pending jobs are levelled, ``flow_edges_s``) are compared
too, but only warned of: every worker marks them when it starts, also one that joins
running workers (a mark with ``joined``, which says nothing of the length), and again
every :data:`REMARK_S` while it runs (joined), and one that joins logs a warning naming
each of its settings that differs from the newest mark of another worker (a worker is its
host and state folder: one restarted is not compared with its own earlier mark), however
far back on the planning topic that mark is (read within :data:`READ_TIMEOUT_S`). A
change of these settings by a rolling restart is then warned of by the first worker
restarted, while the others still run the old values.

Example (in the worker's start, with an admin client that is connected)::

    starts = await check_group_window(admin, settings, "dprobe-worker-planning")
    await announce_window(settings, "dprobe-worker-planning", joined=not starts)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    KafkaError,
    NotCoordinatorError,
)

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
# Marks less than this far apart (by their writers' wall clocks) with no window between
# them come from workers that may be starting the group together: a worker joins the
# group seconds after its mark, so one that checks meanwhile finds no member running
START_GRACE_S = 60.0
# A running worker marks its settings again this often (a joined mark), so that a worker
# joining a group that has run for long finds one without reading far back
REMARK_S = 600.0
DESCRIBE_WAIT_S = 15.0  # longest wait for a group coordinator that is not ready yet


# The settings besides window_s that shape a window (docs/worker.md, "Scaling out")
WINDOW_SHAPE = (
    "grace_s",
    "level_l1_max_util_pct",
    "level_l1_max_mem_bytes",
    "level_l3_min_util_pct",
    "level_l3_min_sm_util_pct",
    "level_ex_min_mem_frac",
    "level_weights",
    "profile_pending",
    "unknown_pending_level",
    "flow_edges_s",
)


def worker_identity(s: WorkerSettings) -> str:
    """Who marks: this host and the worker's state folder, which no two workers of a host
    share (``host:/path``)."""
    return f"{socket.gethostname()}:{Path(s.data_dir).expanduser().resolve()}"


def window_shape(s: WorkerSettings) -> dict[str, Any]:
    """The :data:`WINDOW_SHAPE` settings of ``s``, as a mark carries them (JSON values).

    >>> shape = window_shape(WorkerSettings())
    >>> shape["grace_s"], shape["flow_edges_s"][:2], shape["level_weights"]
    (10.0, [60.0, 240.0], [0.3, 0.5, 0.7, 1.0])
    """
    values = {name: getattr(s, name) for name in WINDOW_SHAPE}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def shape_differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """One ``name here, there`` phrase per setting both hold with other values.

    >>> shape_differences({"grace_s": 30.0, "flow_edges_s": [60.0]},
    ...                   {"grace_s": 10.0, "flow_edges_s": [60.0], "new_one": 1})
    ['grace_s 30 here, 10 there']
    """

    def text(value: Any) -> str:
        if isinstance(value, list):
            return ",".join(text(v) for v in value)
        return f"{value:g}" if isinstance(value, float) else str(value)

    return [
        f"{name} {text(mine[name])} here, {text(theirs[name])} there"
        for name in mine
        if name in theirs and mine[name] != theirs[name]
    ]


class WindowLengthMismatchError(UsageError):
    """Running workers of the app id window with another length than this one."""


async def check_group_window(admin: Any, s: WorkerSettings, planning_topic: str) -> bool:
    """Raise :class:`WindowLengthMismatchError` when workers of ``s.app_id`` run and the
    newest length on ``planning_topic`` is not ``s.window_s``; warn of the other settings
    that shape a window where they differ from another worker's newest mark. Nothing is
    checked when the group cannot be described or its topic read. ``True`` when no worker
    of the group runs: this one then sets the length, and marks it
    (:func:`announce_window`)."""
    try:
        members = await _members(admin, s.app_id)
        if not members:
            return True
        lengths = await _read_lengths(s, planning_topic)
    except (KafkaError, OSError, TimeoutError) as exc:
        log.debug("window length of group %s not checked: %r", s.app_id, exc)
        return False
    running = lengths.newest
    if running is None or _same(running, s.window_s):
        me = worker_identity(s)
        mark = lengths.newest_of_another(me)
        if mark is None and lengths.start > 0:  # marked before the last LOOK_BACK records
            try:
                mark = await _older_mark_of_another(s, planning_topic, lengths.start, me)
            except (KafkaError, OSError, TimeoutError) as exc:
                log.debug("older marks of group %s not read: %r", s.app_id, exc)
        _warn_of_shape(s, mark, planning_topic)
        return False
    raise WindowLengthMismatchError(
        f"the {members} running worker(s) of app id {s.app_id!r} make {running:.10g}-s "
        f"windows (the newest length on {planning_topic}), this one {s.window_s:.10g}-s "
        f"windows: one group with two lengths writes overlapping windows and drops data as "
        f"late. Start it with --window {running:.10g}, or stop every worker of the group to "
        f"change the length (a killed worker counts as running for session_timeout_s, "
        f"{s.session_timeout_s:g} s)"
    )


def _warn_of_shape(
    s: WorkerSettings, mark: codec.WorkerStarted | None, planning_topic: str
) -> None:
    """Log a warning when ``mark`` (another worker's newest) holds window settings other
    than ``s``'s; an older worker's mark holds none."""
    if mark is None:
        return
    differ = shape_differences(window_shape(s), mark.shape)
    if differ:
        log.warning(
            "this worker windows with other settings than the worker of app id %r that "
            "marked its settings last before it (%s, %.0f s ago by their clocks; its mark on "
            "%s): %s. Each "
            "worker windows its own partitions with its own settings, so tenants are "
            "windowed differently by partition until every worker of the group runs with "
            "the same ones (after a change by a rolling restart, until the last worker has "
            "restarted)",
            s.app_id, mark.worker or "a worker", max(0.0, time.time() - mark.at),
            planning_topic, "; ".join(differ),
        )  # fmt: skip


async def _members(admin: Any, group: str) -> int:
    """:func:`group_members`, asked again for up to :data:`DESCRIBE_WAIT_S` while the
    group's coordinator is not ready (it loads its groups for a while after a broker
    restart: a check given up then would leave the group's length unmarked)."""
    deadline = time.monotonic() + DESCRIBE_WAIT_S
    while True:
        try:
            return await group_members(admin, group)
        except (CoordinatorLoadInProgressError, CoordinatorNotAvailableError, NotCoordinatorError):
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)


async def announce_window(s: WorkerSettings, planning_topic: str, joined: bool = False) -> None:
    """Leave a :class:`~dprobe.streams.codec.WorkerStarted` mark with ``s.window_s`` and
    its :func:`window_shape` on ``planning_topic`` (which exists), for the workers that
    join after this one, and raise :class:`WindowLengthMismatchError` when a worker with
    another length marked the group just before this one (both started it at once).
    ``joined``: this worker joined running workers (it passed
    :func:`check_group_window`); its mark says nothing of the length and is not read
    back. A mark that cannot be written or read back is logged, not raised."""
    producer = AIOKafkaProducer(**s.kafka.client_kwargs(), acks="all")
    try:
        await producer.start()
        mark = codec.WorkerStarted(
            window_s=s.window_s,
            at=time.time(),  # when it is sent
            shape=window_shape(s),
            joined=joined,
            worker=worker_identity(s),
        )
        sent = await producer.send_and_wait(planning_topic, codec.encode_started(mark), key=b"plan")
    except (KafkaError, OSError) as exc:  # the worker runs on; a later one may be misjudged
        log.warning("could not mark this worker's window length on %s: %r", planning_topic, exc)
        return
    finally:
        await producer.stop()
    if joined:
        return
    try:
        lengths = await _read_lengths(s, planning_topic, upto=sent.offset + 1)
    except (KafkaError, OSError, TimeoutError) as exc:
        log.debug("marks of group %s not read back: %r", s.app_id, exc)
        return
    first = lengths.lost.get(sent.offset)
    if first is not None:
        raise WindowLengthMismatchError(
            f"a worker of app id {s.app_id!r} with {first.window_s:.10g}-s windows started "
            f"the group just before this one ({abs(mark.at - first.at):.0f} s apart by their "
            f"clocks), which makes {s.window_s:.10g}-s windows (their marks on "
            f"{planning_topic}): one group with two lengths writes overlapping windows and "
            f"drops data as late. Start it with --window {first.window_s:.10g}, or stop every "
            f"worker of the group and start them with one length (a worker that started and "
            f"stopped less than {START_GRACE_S:g} s before still counts)"
        )


async def _older_mark_of_another(
    s: WorkerSettings, planning_topic: str, before: int, worker: str
) -> codec.WorkerStarted | None:
    """The newest mark of a worker other than ``worker`` with ``s.window_s`` before offset
    ``before`` of ``planning_topic``, read backwards in growing stretches until one is
    found, the topic's start or :data:`READ_TIMEOUT_S`. A group that has run for a while
    has forwarded far more than :data:`LOOK_BACK` windows since its workers marked their
    settings (at their start, and every :data:`REMARK_S` since). A mark of another
    length is not the settings of a running worker: of the group before its length
    changed, or of a worker whose start lost (it exited)."""
    async with _planning_reader(s, planning_topic) as (consumer, tp):
        first = (await consumer.beginning_offsets([tp]))[tp]
        deadline = time.monotonic() + READ_TIMEOUT_S
        hi, stretch = before, LOOK_BACK
        while hi > first and time.monotonic() < deadline:
            lo = max(first, hi - stretch)
            found = None
            async for _, mark in _messages(consumer, tp, lo, hi, deadline, marks_only=True):
                if (
                    isinstance(mark, codec.WorkerStarted)
                    and mark.worker != worker
                    and _same(mark.window_s, s.window_s)
                ):
                    found = mark  # read forwards: the last one is the newest
            if found is not None:
                return found
            hi, stretch = lo, stretch * 4
        return None


@contextlib.asynccontextmanager
async def _planning_reader(
    s: WorkerSettings, planning_topic: str
) -> AsyncIterator[tuple[AIOKafkaConsumer, TopicPartition]]:
    """A consumer of no group, assigned ``planning_topic``'s one partition, stopped after."""
    consumer = AIOKafkaConsumer(**s.kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(planning_topic, 0)
        consumer.assign([tp])
        yield consumer, tp
    finally:
        await consumer.stop()


async def _messages(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    lo: int,
    hi: int,
    deadline: float,
    *,
    marks_only: bool = False,
) -> AsyncIterator[tuple[int, Any]]:
    """The offsets and decoded messages of ``tp`` from offset ``lo`` up to (without) ``hi``,
    read until ``deadline`` (``time.monotonic()``); a record this check cannot read is
    skipped. ``marks_only``: only WorkerStarted marks are decoded and yielded (windows and
    progress, nearly all of a long stretch, are not)."""
    consumer.seek(tp, lo)
    while await consumer.position(tp) < hi and time.monotonic() < deadline:
        batch = await consumer.getmany(tp, timeout_ms=500)
        for record in batch.get(tp, []):
            value = record.value or b""
            if record.offset >= hi:
                return
            if marks_only and value[:1] != codec.STARTED:
                continue
            try:
                message = codec.decode_planning(value)
            except Exception:  # noqa: BLE001 - a record this check cannot read
                continue
            yield record.offset, message


@dataclass
class _Lengths:
    """What the planning topic's tail says of the group's window length, read forwards:
    the newest length, and the marks that lost to an earlier one (see the module's
    docstring)."""

    newest: float | None = None
    start: int = 0  # the first offset read
    held: codec.WorkerStarted | None = None  # the newest mark since the newest window that held
    lost: dict[int, codec.WorkerStarted] = field(default_factory=dict)  # offset -> it lost to
    marks: list[codec.WorkerStarted] = field(default_factory=list)  # joined or not; none lost

    def window(self, length: float) -> None:
        self.newest = length
        self.held = None

    def mark(self, offset: int, mark: codec.WorkerStarted) -> None:
        if mark.joined:  # a worker that passed the check: its settings, not the length
            self.marks.append(mark)
            return
        held = self.held
        together = held is not None and abs(mark.at - held.at) < START_GRACE_S
        if held is not None and together and not _same(held.window_s, mark.window_s):
            self.lost[offset] = held
            return
        self.held = mark
        self.newest = mark.window_s
        self.marks.append(mark)

    def newest_of_another(self, worker: str) -> codec.WorkerStarted | None:
        """The newest mark that did not lose, of a worker other than ``worker``."""
        return next((m for m in reversed(self.marks) if m.worker != worker), None)


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


async def newest_window_length(s: WorkerSettings, planning_topic: str) -> float | None:
    """The window length in seconds the newest TenantWindow or WorkerStarted mark on
    ``planning_topic`` (one partition, which exists) says, among its last
    :data:`LOOK_BACK` records, skipping marks that lost; ``None`` when there is none."""
    return (await _read_lengths(s, planning_topic)).newest


async def _read_lengths(
    s: WorkerSettings, planning_topic: str, upto: int | None = None
) -> _Lengths:
    """Read ``planning_topic``'s last :data:`LOOK_BACK` records before offset ``upto``
    (default: its end) into a :class:`_Lengths`."""
    lengths = _Lengths()
    async with _planning_reader(s, planning_topic) as (consumer, tp):
        end = (await consumer.end_offsets([tp]))[tp] if upto is None else upto
        if end == 0:
            return lengths
        lengths.start = max(0, end - LOOK_BACK)
        deadline = time.monotonic() + READ_TIMEOUT_S
        async for offset, message in _messages(consumer, tp, lengths.start, end, deadline):
            if isinstance(message, TenantWindow):
                lengths.window(message.window_end - message.window_start)
            elif isinstance(message, codec.WorkerStarted):
                lengths.mark(offset, message)
    return lengths
