"""A bounded, append-only disk spool: every snapshot is written here before it is sent.

Records are appended to segment files (``<id>.spool``); each record is framed as
``length (u32) | crc32 (u32) | seq (u64) | payload``, written whole and (by default)
fsynced, so a crash loses at most the tick in progress and a torn tail is
cut off on the next open; a record the disk has no room for is taken back and the
error raised. A ``cursor`` file holds the position up to which records have
been delivered; the sender reads from the cursor, in order, and acks what Kafka
confirmed. Fully delivered segments are deleted, even when a full disk has no room to
save the cursor (it is kept in memory and saved by a later ack). When the spool grows past
``max_bytes``, the oldest segment is deleted and its undelivered records are counted as
dropped (``on_drop``); those of the batch being sent are settled by Kafka's answer:
delivered when they are acked, dropped at the next :meth:`~Spool.read` (the batch failed)
or at :meth:`~Spool.close`. A record found corrupt while reading (bit rot) is cut off with
the rest of its segment, and those records are counted as dropped too. Every record
appended is thus counted once, as delivered (acked) or dropped, and
:attr:`~Spool.pending_records` (kept from a record count per segment) is what remains.

Example:
    >>> import tempfile
    >>> spool = Spool(tempfile.mkdtemp(), max_bytes=1 << 20)
    >>> spool.open()
    >>> spool.append(0, b'{"seq":0}'); spool.append(1, b'{"seq":1}')
    >>> batch = spool.read(max_records=10)
    >>> [r.seq for r in batch], spool.pending_records
    ([0, 1], 2)
    >>> spool.ack(batch[-1].end, len(batch)); spool.pending_records
    0
    >>> spool.close()
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dprobe.count_text import count_of
from dprobe.errors import UsageError
from dprobe.folders import fsync_dir, make_dirs

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">IIQ")  # payload length, crc32 of payload, seq
_SUFFIX = ".spool"
_MAX_RECORD = 64 * 1024 * 1024
#: The errors of a write that a full disk (or a user's exhausted quota) refuses.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
DROP_LOG_EVERY_S = 60.0  # a reason's drops are logged at most this often
_monotonic = time.monotonic

Position = tuple[int, int]  # (segment id, byte offset)


def _clock_time(at: float) -> str:
    """The local wall-clock time (``HH:MM:SS``) of the monotonic time ``at``."""
    return time.strftime("%H:%M:%S", time.localtime(time.time() - (_monotonic() - at)))


@dataclass(frozen=True, slots=True)
class Record:
    """One spooled snapshot; ``end`` is the position right after it (what to ack)."""

    seq: int
    payload: bytes
    end: Position


class Spool:
    """Append-only segmented spool in ``directory`` (one spool per host).

    Args:
        directory: where segments and the cursor live (created if missing).
        max_bytes: bound of all segments together.
        segment_bytes: size at which a new segment starts (default ``max_bytes // 8``).
        fsync: fsync every append and cursor update (crash-safe against power loss).
        on_drop: called with the number of undelivered records lost for good and why:
            ``spool_full`` (dropped when full) or ``spool_corrupt`` (cut off with a
            corrupt record).
        on_corrupt: called with the number of bytes cut off as torn or corrupt.

    One reader: the batch of the last :meth:`read` is the one in flight until it is acked.
    """

    def __init__(
        self,
        directory: Path | str,
        max_bytes: int = 256 * 1024 * 1024,
        segment_bytes: int | None = None,
        *,
        fsync: bool = True,
        on_drop: Callable[[int, str], None] | None = None,
        on_corrupt: Callable[[int], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(64 * 1024, max_bytes // 8)
        self.fsync = fsync
        self._on_drop = on_drop or (lambda n, reason: None)
        self._on_corrupt = on_corrupt or (lambda n: None)
        self._sizes: dict[int, int] = {}  # segment id -> bytes, in id order
        self._counts: dict[int, int] = {}  # segment id -> records (delivered ones included)
        self._cursor: Position = (0, 0)
        self._cursor_index = 0  # records of the cursor's segment before the cursor
        self._cursor_unsaved = False  # the disk had no room for the last one
        self._in_flight: dict[Position, int] = {}  # last read: end -> records in its segment to it
        self._gone_in_flight: set[Position] = set()  # of those, deleted by the bound
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._active = 0
        self.last_seq: int | None = None
        self.dropped = 0
        self._drops_said: dict[str, tuple[float, int]] = {}  # reason: logged when, since

    # lifecycle
    def open(self) -> None:
        """Create or recover the spool: load the cursor, cut torn tails, count pending.

        Raises :class:`UsageError` if another process has this spool open."""
        make_dirs(self.directory, fsync=self.fsync)
        self._lock()
        ids = sorted(
            int(p.name.removesuffix(_SUFFIX))
            for p in self.directory.iterdir()
            if p.name.endswith(_SUFFIX) and p.name.removesuffix(_SUFFIX).isdigit()
        )
        cursor = self._load_cursor()
        if cursor is None:
            cursor = (ids[0], 0) if ids else (0, 0)
        for sid in [i for i in ids if i < cursor[0]]:
            self._path(sid).unlink()
        ids = [i for i in ids if i >= cursor[0]]
        if not ids:
            cursor = (cursor[0], 0)  # segments removed by hand: start afresh
        elif cursor[0] not in ids:
            cursor = (ids[0], 0)
        self._sizes = {}
        self._counts = {}
        self._cursor_index = 0
        self._in_flight = {}
        self._gone_in_flight = set()
        self.last_seq = None
        for sid in ids:
            size, count, last = self._scan(sid, 0, truncate=True)
            self._sizes[sid] = size
            self._counts[sid] = count
            if last is not None:
                self.last_seq = last
            if sid == cursor[0]:
                offset = min(cursor[1], size)
                cursor = (sid, offset)
                self._cursor_index = self._index(sid, offset)
        self._cursor = cursor
        self._active = ids[-1] if ids else cursor[0]
        self._sizes.setdefault(self._active, 0)
        self._counts.setdefault(self._active, 0)
        made = not self._path(self._active).exists()
        self._open_active()
        if made and self.fsync:  # the active segment's entry, as a rolled one's
            fsync_dir(self.directory)

    def close(self) -> None:
        """Close the active segment (idempotent). Records stay on disk for the next run."""
        self._settle_in_flight()
        self._say_unsaid_drops()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None

    def _lock(self) -> None:
        if self._lock_fd is not None:
            return
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(
                f"spool {self.directory} is in use by another collector (same host id?)"
            ) from None
        self._lock_fd = fd

    # writing
    def append(self, seq: int, payload: bytes) -> None:
        """Append one record (durable on return when ``fsync``); drop the oldest if full."""
        if self._fd is None:
            raise RuntimeError("spool is not open")
        if len(payload) > _MAX_RECORD:
            raise ValueError(f"record of {len(payload)} bytes exceeds {_MAX_RECORD}")
        frame = _HEADER.pack(len(payload), zlib.crc32(payload), seq) + payload
        if (
            self._sizes[self._active]
            and self._sizes[self._active] + len(frame) > self.segment_bytes
        ):
            self._roll()
        start = self._sizes[self._active]
        try:
            view = memoryview(frame)
            while view:  # a full disk may write part of it, then refuse the rest
                view = view[os.write(self._fd, view) :]
            if self.fsync:
                os.fsync(self._fd)
        except OSError:
            # take back what was written: a torn record would cut off those after it
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            raise
        self._sizes[self._active] += len(frame)
        self._counts[self._active] += 1
        self.last_seq = seq
        self._enforce_bound()

    def _roll(self) -> None:
        """Start the next segment. One that cannot be created (no room for a file) leaves
        the active one active and raises: the record that needed it is not written."""
        assert self._fd is not None
        fd = self._open_segment(self._active + 1)
        os.close(self._fd)
        self._fd = fd
        self._active += 1
        self._sizes[self._active] = 0
        self._counts[self._active] = 0
        if self.fsync:
            fsync_dir(self.directory)

    def _enforce_bound(self) -> None:
        while self.total_bytes > self.max_bytes and len(self._sizes) > 1:
            oldest = next(iter(self._sizes))
            before = self._cursor_index if self._cursor[0] == oldest else 0
            lost = self._counts.pop(oldest) - before
            del self._sizes[oldest]
            self._path(oldest).unlink(missing_ok=True)
            self._cursor = (next(iter(self._sizes)), 0)
            self._cursor_index = 0
            self._try_save_cursor()
            # the batch in flight may still be confirmed: counted when Kafka answers
            sending = [end for end in self._in_flight if end[0] == oldest]
            for end in sending:
                del self._in_flight[end]
            self._gone_in_flight.update(sending)
            self._drop(
                lost - len(sending),
                "spool_full",
                "spool full (%d bytes): dropped %s",
                self.max_bytes,
                noun="oldest snapshot",
            )

    def _drop(
        self, lost: int, reason: str, msg: str, *args: object, noun: str = "snapshot"
    ) -> None:
        """Count ``lost`` records as dropped for good for ``reason``; ``msg`` ends with
        the count of ``noun`` s (``%s``). Logged at most once a minute per reason (a full
        spool drops at every tick while Kafka is away), with the drops since the last line."""
        if lost <= 0:
            return
        self.dropped += lost
        self._on_drop(lost, reason)
        now = _monotonic()
        said = self._drops_said.get(reason)
        if said is not None and now - said[0] < DROP_LOG_EVERY_S:
            self._drops_said[reason] = (said[0], said[1] + lost)
            return
        self._drops_said[reason] = (now, 0)
        since = ""
        if said is not None and said[1]:
            since = f", and {said[1]:,} more since {_clock_time(said[0])}"
        log.warning(
            msg + "%s (drops are logged at most once a minute; "
            "dprobe_collector_dropped_snapshots_total counts each)",
            *args,
            count_of(lost, noun),
            since,
        )

    def _say_unsaid_drops(self) -> None:
        """Log the drops counted since the last line and not logged yet (they waited for
        the minute to pass), and forget when drops were last logged: the next one is
        logged at once."""
        for reason, (when, unsaid) in sorted(self._drops_said.items()):
            if unsaid:
                log.warning(
                    "%s: dropped %s since %s, not logged then (%s)",
                    "spool full" if reason == "spool_full" else reason,
                    count_of(unsaid, "more snapshot"),
                    _clock_time(when),
                    "dprobe_collector_dropped_snapshots_total counts each",
                )
        self._drops_said.clear()

    def _settle_in_flight(self) -> None:
        """The batch in flight was not confirmed: its deleted records are lost."""
        lost, self._gone_in_flight = len(self._gone_in_flight), set()
        self._in_flight = {}
        self._drop(lost, "spool_full", "spool full: dropped %s that were being sent")

    # reading and acking
    def read(self, max_records: int = 500, max_bytes: int = 4 * 1024 * 1024) -> list[Record]:
        """Undelivered records from the cursor, in order (not consumed until :meth:`ack`).

        They are the batch in flight; a batch read before and never acked has failed."""
        self._settle_in_flight()
        out: list[Record] = []
        size = 0
        sid, offset = self._cursor
        for seg in [i for i in self._sizes if i >= sid]:
            pos = offset if seg == sid else 0
            index = self._cursor_index if seg == sid else 0
            end = self._sizes[seg]
            if pos >= end:
                continue
            with self._path(seg).open("rb") as f:
                f.seek(pos)
                while pos < end:
                    if len(out) >= max_records or size >= max_bytes:
                        return out
                    head = f.read(_HEADER.size)
                    length, crc, seq = (
                        _HEADER.unpack(head) if len(head) == _HEADER.size else (0, 0, 0)
                    )
                    body = f.read(length) if head else b""
                    if len(head) < _HEADER.size or len(body) < length or zlib.crc32(body) != crc:
                        self._cut(seg, pos, end, index)
                        break
                    pos += _HEADER.size + length
                    index += 1
                    out.append(Record(seq, body, (seg, pos)))
                    self._in_flight[(seg, pos)] = index
                    size += _HEADER.size + length
        return out

    def _cut(self, seg: int, pos: int, end: int, index: int) -> None:
        """Cut a segment at a corrupt record (bit rot, not a crash: those are cut at open);
        ``index`` records of the segment precede it, the others are lost."""
        log.error("spool segment %d corrupt at byte %d: cutting %d bytes", seg, pos, end - pos)
        self._on_corrupt(end - pos)
        with self._path(seg).open("r+b") as f:
            f.truncate(pos)
        self._sizes[seg] = pos
        lost, self._counts[seg] = self._counts[seg] - index, index
        self._drop(lost, "spool_corrupt", "spool segment %d corrupt: dropped %s", seg)

    def ack(self, position: Position, count: int) -> None:
        """Mark everything up to ``position`` (a record's ``end``) as delivered; delete
        finished segments. ``count``, the records acked, is for the caller's bookkeeping:
        the spool counts them itself, as some may have been dropped since the read."""
        self._gone_in_flight = {end for end in self._gone_in_flight if end > position}
        if position <= self._cursor:
            return  # already acked, or its segment was dropped meanwhile
        index = self._in_flight.get(position)
        self._cursor = position
        self._cursor_index = self._index(*position) if index is None else index
        self._in_flight = {end: i for end, i in self._in_flight.items() if end > position}
        self._try_save_cursor()
        for sid in [i for i in self._sizes if i < position[0]]:
            del self._sizes[sid]
            del self._counts[sid]
            self._path(sid).unlink(missing_ok=True)
        if self._drops_said and self.pending_records == 0:  # caught up: the outage is over
            self._say_unsaid_drops()

    # state
    @property
    def pending_records(self) -> int:
        """Records neither delivered nor dropped."""
        sid = self._cursor[0]
        counts = list(self._counts.items())  # one step: /metrics reads it from its thread
        return sum(n for i, n in counts if i >= sid) - self._cursor_index

    @property
    def total_bytes(self) -> int:
        """Bytes of every segment on disk (delivered parts of the oldest included)."""
        return sum(self._sizes.values())

    @property
    def pending_bytes(self) -> int:
        """Bytes not yet delivered."""
        sid, offset = self._cursor
        sizes = list(self._sizes.items())  # one step: /metrics reads it from its thread
        return sum(size for i, size in sizes if i >= sid) - offset

    # files
    def _path(self, sid: int) -> Path:
        return self.directory / f"{sid:012d}{_SUFFIX}"

    def _open_active(self) -> None:
        self._fd = self._open_segment(self._active)

    def _open_segment(self, sid: int) -> int:
        return os.open(self._path(sid), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _scan(self, sid: int, offset: int, truncate: bool = False) -> tuple[int, int, int | None]:
        """(valid size, records from ``offset``, last seq) of a segment; cut a torn tail."""
        path = self._path(sid)
        data = path.read_bytes()
        pos, count, last = 0, 0, None
        while pos + _HEADER.size <= len(data):
            length, crc, seq = _HEADER.unpack_from(data, pos)
            body = data[pos + _HEADER.size : pos + _HEADER.size + length]
            if len(body) < length or zlib.crc32(body) != crc:
                break
            if pos >= offset:
                count += 1
            pos += _HEADER.size + length
            last = seq
        if truncate and pos < len(data):
            log.warning("spool segment %s: cutting %d torn bytes", path.name, len(data) - pos)
            self._on_corrupt(len(data) - pos)
            with path.open("r+b") as f:
                f.truncate(pos)
        return pos, count, last

    def _index(self, sid: int, offset: int) -> int:
        """Records of segment ``sid`` before byte ``offset``."""
        return self._counts[sid] - self._scan(sid, offset)[1]

    def _load_cursor(self) -> Position | None:
        try:
            sid, offset = (self.directory / "cursor").read_text().split()
            return int(sid), int(offset)
        except FileNotFoundError:
            return None
        except ValueError:
            log.error("spool cursor unreadable: resending everything spooled")  # noqa: TRY400
            return None

    def _try_save_cursor(self) -> None:
        """Save the cursor; on a full disk keep it in memory only (the next ack saves it),
        so the segments it finished are still deleted, which frees room. If the collector
        stops before then, the next run resends from the saved cursor (duplicates, which
        consumers drop by ``(host, seq)``; nothing is lost)."""
        try:
            self._save_cursor()
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise
            if not self._cursor_unsaved:
                log.warning("no room on disk to save the spool's cursor (%s)", exc.strerror)
            self._cursor_unsaved = True
        else:
            self._cursor_unsaved = False

    def _save_cursor(self) -> None:
        tmp = self.directory / "cursor.tmp"
        with tmp.open("w") as f:
            f.write(f"{self._cursor[0]} {self._cursor[1]}\n")
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.directory / "cursor")
