"""Idempotent hourly Parquet files of the archived topics, written atomically.

Rows are buffered per (topic kind, partition, event-time hour) and written at
:meth:`ArchiveWriter.flush`, one file per buffer, in a folder per kind (``samples``,
``jobs``, ``cluster``), named by what it holds::

    DIR/samples/date=2026-11-30/hour=13/samples-p0-o1200-o4799.parquet

(kind, partition, first and last offset). Re-reading the same offsets after a restart
therefore produces the same name and overwrites instead of duplicating; and
:meth:`remove_uncommitted` deletes files whose offsets were never committed, so a restart
that cuts its buffers differently cannot leave two files with the same records. Each
file is written to a hidden ``.tmp`` file, fsynced, renamed into place and its folder
fsynced: a reader sees a whole file or none. A folder created on the way (kind, date,
hour) is fsynced into its parent before the file is written, so a power loss cannot drop
the folder of a file whose offsets were committed. Files are zstd-compressed and their
string columns dictionary-encoded.

A file that cannot be written (disk full, folder not writable) raises
:class:`ArchiveWriteError`, which names it; :meth:`ArchiveWriter.check_writable` finds an
unusable folder before anything is read.

Example:
    >>> import tempfile
    >>> from dprobe.schema import JobEvent, encode
    >>> from dprobe.sinks.archive_schema import row_of
    >>> w = ArchiveWriter(tempfile.mkdtemp())
    >>> ev = JobEvent(ts=1_700_000_000.0, event="submit", job="j1", tenant="vc-a", gpus=8)
    >>> w.add("jobs", row_of("jobs", ev, key=b"j1", value=encode(ev), partition=0,
    ...                      offset=42, timestamp_ms=None))
    >>> [p.name for p in w.flush()]
    ['jobs-p0-o42-o42.parquet']
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import pyarrow.parquet as pq

from dprobe.errors import DprobeError
from dprobe.folders import check_writable, fsync_dir, make_dirs
from dprobe.sinks.archive_schema import DICTIONARY_COLUMNS, KINDS, table_of

log = logging.getLogger(__name__)

NAME_RE: Final = re.compile(
    r"^(?P<kind>[a-z]+)-p(?P<partition>\d+)-o(?P<first>\d+)-o(?P<last>\d+)\.parquet$"
)
ROW_OVERHEAD_BYTES: Final = 96  # estimated per-row cost besides key and value


class ArchiveWriteError(DprobeError, OSError):
    """An archive file could not be written (an :class:`OSError` such as ENOSPC or EACCES).

    Not retriable by the archive: its offsets are not committed, and a restart reads the
    records again. ``filename`` is the file, ``errno``/``strerror`` the cause.

    >>> str(ArchiveWriteError(28, "No space left on device", "a/b.parquet"))
    'cannot write a/b.parquet: No space left on device'
    """

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"

    @classmethod
    def of(cls, path: Path, exc: OSError) -> ArchiveWriteError:
        """The error for ``path``, from the :class:`OSError` that stopped its write."""
        text = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
        return cls(exc.errno, text, str(path))


@dataclass(frozen=True, slots=True)
class ArchiveFile:
    """Where a file lies and what it holds (parsed from its name)."""

    path: Path
    kind: str
    partition: int
    first: int
    last: int


def hour_dir(kind: str, ts: float) -> Path:
    """Relative folder of the event-time hour of ``ts`` (UTC).

    >>> str(hour_dir("samples", 1_700_000_000.0))
    'samples/date=2023-11-14/hour=22'
    """
    t = time.gmtime(ts)
    return (
        Path(kind)
        / f"date={t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
        / f"hour={t.tm_hour:02d}"
    )


def file_name(kind: str, partition: int, first: int, last: int) -> str:
    """``samples-p0-o1200-o4799.parquet``: kind, partition, first and last offset."""
    return f"{kind}-p{partition}-o{first}-o{last}.parquet"


def list_files(out_dir: str | Path, kind: str | None = None) -> Iterator[ArchiveFile]:
    """Every archive file under ``out_dir`` (of one ``kind`` if given), in path order; a
    kind without a folder (an archive written before it was archived) has none."""
    root = Path(out_dir)
    for k in (kind,) if kind else KINDS:
        for path in sorted((root / k).glob("date=*/hour=*/*.parquet")):
            m = NAME_RE.match(path.name)
            if m and m["kind"] == k:
                yield ArchiveFile(path, k, int(m["partition"]), int(m["first"]), int(m["last"]))


class ArchiveWriter:
    """Buffers archive rows and writes them as idempotent, atomic Parquet files.

    Not thread-safe: one owner calls :meth:`add`, :meth:`flush` and :meth:`remove_uncommitted`
    (the owner may run :meth:`flush` in a worker thread while it does nothing else).
    """

    def __init__(self, out_dir: str | Path, *, compression_level: int = 3, fsync: bool = True):
        self.out_dir = Path(out_dir)
        self.compression_level = compression_level
        self.fsync = fsync
        self._buffers: dict[tuple[str, int, Path], list[dict[str, Any]]] = {}
        self.buffered_records = 0
        self.buffered_bytes = 0
        self.files_written = 0  # files written and not removed since (what the folder holds)
        self.records_written = 0
        # files written whose offsets are not known to be committed: path -> (kind,
        # partition, last offset, rows); they may be removed and written again
        self._unsure: dict[Path, tuple[str, int, int, int]] = {}

    def add(self, kind: str, row: dict[str, Any]) -> None:
        """Buffer one row (from :func:`~dprobe.sinks.archive_schema.row_of`) of topic ``kind``."""
        if kind not in KINDS:
            raise ValueError(f"unknown topic kind {kind!r} (expected one of {KINDS})")
        key = (kind, int(row["partition"]), hour_dir(kind, row["ts"]))
        self._buffers.setdefault(key, []).append(row)
        self.buffered_records += 1
        self.buffered_bytes += _row_bytes(row)

    def check_writable(self) -> None:
        """Create the archive folder (with its parents) and write and remove a probe file
        in it; :class:`~dprobe.errors.UsageError` naming the folder when that fails.

        >>> import tempfile
        >>> ArchiveWriter(Path(tempfile.mkdtemp()) / "new" / "archive").check_writable()
        """
        make = partial(make_dirs, fsync=self.fsync)
        check_writable(self.out_dir, "archive folder", make=make, fsync=self.fsync)

    def flush(self) -> list[Path]:
        """Write every buffer to its file (atomically, durably) and empty the buffers.

        Returns the paths written. When it raises, buffers written so far are gone and the
        rest are kept; offsets must not be committed then (files are rewritten on retry).
        An :class:`OSError` is raised as :class:`ArchiveWriteError` naming the file.
        """
        written: list[Path] = []
        for key in sorted(self._buffers, key=lambda k: (k[0], k[1], str(k[2]))):
            kind, partition, rel = key
            rows = sorted(self._buffers[key], key=lambda r: r["offset"])
            path = (
                self.out_dir
                / rel
                / file_name(kind, partition, rows[0]["offset"], rows[-1]["offset"])
            )
            try:
                self._write_atomic(path, kind, rows)
            except OSError as exc:
                raise ArchiveWriteError.of(path, exc) from exc
            del self._buffers[key]
            self.buffered_records -= len(rows)
            self.buffered_bytes -= sum(map(_row_bytes, rows))
            self._uncount(path)  # written again under the same name: counted once
            self.files_written += 1
            self.records_written += len(rows)
            self._unsure[path] = (kind, partition, rows[-1]["offset"], len(rows))
            written.append(path)
        return written

    def _write_atomic(self, path: Path, kind: str, rows: list[dict[str, Any]]) -> None:
        make_dirs(path.parent, fsync=self.fsync)
        tmp = path.with_name(f".{path.name}.tmp")
        table = table_of(kind, rows)
        try:
            with open(tmp, "wb") as fh:
                pq.write_table(
                    table,
                    fh,
                    compression="zstd",
                    compression_level=self.compression_level,
                    use_dictionary=DICTIONARY_COLUMNS[kind],
                )
                fh.flush()
                if self.fsync:
                    os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if self.fsync:
            fsync_dir(path.parent)

    def remove_uncommitted(
        self, kind: str, partition: int, committed: int, *, discard: bool = True
    ) -> list[Path]:
        """Delete files of ``kind``/``partition`` starting at or after offset ``committed``
        (never committed, so they will be read and written again), and stray temp files.

        With ``discard``, also drops buffered rows of that partition (read again too);
        without, the caller has dropped what it will read again already.
        """
        removed = []
        self.committed(kind, partition, committed)
        for f in list_files(self.out_dir, kind):
            if f.partition != partition or f.last < committed:
                continue
            if f.first >= committed:
                f.path.unlink(missing_ok=True)
                self._uncount(f.path)
                removed.append(f.path)
            else:  # offsets were moved by hand into a file: keep it (no loss), say so
                log.warning("%s straddles committed offset %d; kept", f.path, committed)
        for tmp in (self.out_dir / kind).glob(f"date=*/hour=*/.{kind}-p{partition}-*.tmp"):
            tmp.unlink(missing_ok=True)
        if discard:
            self.discard(kind, partition)
        if removed:
            log.info(
                "removed %d uncommitted archive file(s) of %s p%d", len(removed), kind, partition
            )
        return removed

    def committed(self, kind: str, partition: int, offset: int) -> None:
        """Note that ``kind``/``partition`` is committed up to ``offset`` (exclusive): its
        files before it are never removed, so they stay in the counts."""
        for path, (k, p, last, _rows) in list(self._unsure.items()):
            if k == kind and p == partition and last < offset:
                del self._unsure[path]

    def _uncount(self, path: Path) -> None:
        """Take a file this writer wrote, and that is gone or replaced, out of the counts."""
        gone = self._unsure.pop(path, None)
        if gone is not None:
            self.files_written -= 1
            self.records_written -= gone[3]

    def discard(self, kind: str, partition: int) -> int:
        """Drop the buffered rows of ``kind``/``partition`` (they will be read again, here
        or by the partition's new owner); the number of rows dropped."""
        dropped = 0
        for key in [k for k in self._buffers if k[0] == kind and k[1] == partition]:
            rows = self._buffers.pop(key)
            dropped += len(rows)
            self.buffered_records -= len(rows)
            self.buffered_bytes -= sum(map(_row_bytes, rows))
        return dropped


def _row_bytes(row: dict[str, Any]) -> int:
    """Estimated memory of one buffered row."""
    return len(row["value"]) + len(row["key"] or b"") + ROW_OVERHEAD_BYTES
