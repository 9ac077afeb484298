"""Read a ``dprobe archive`` folder back as records, in event-time order.

Files are grouped by their event-time hour (``date=.../hour=...``); each hour of every
topic (``samples``, ``jobs``, ``cluster``) is read at once and sorted by event time, so
memory holds one hour at a time. At the same event time the scheduler's reports
(``cluster``) come first, so a replayed plan sees the quotas before the demand of that
instant; then partition, topic (samples before jobs) and offset. Keys and values are the
archived bytes, unchanged. A record found in two files (an archiver that lost its
partition while stalled and flushed it after the next one had; two archivers writing one
folder) is read once: a record is its topic, partition and offset. An archive written
before ``cluster`` was archived has no ``cluster`` folder and reads as it did. ``PATH``
may be the archive folder, one topic's folder, one of its day (``date=``) or hour
(``hour=``) folders, or one file. A file that is not such an
archive (a column missing or of another type, a null ``partition``, ``offset`` or
``value``, a ``ts`` that is not epoch seconds within the schema's bounds, such as one in
milliseconds) is a ``UsageError`` naming the file and, for a bad value, the row.

Example:
    >>> import tempfile
    >>> from dprobe.schema import JobEvent, encode
    >>> from dprobe.sinks.archive_schema import row_of
    >>> from dprobe.sinks.parquet_archive import ArchiveWriter
    >>> d = tempfile.mkdtemp(); w = ArchiveWriter(d, fsync=False)
    >>> for i, t in enumerate([7200.0, 3600.0]):
    ...     ev = JobEvent(ts=t, event="submit", job=f"j{i}", tenant="a", gpus=1)
    ...     w.add("jobs", row_of("jobs", ev, key=ev.job.encode(), value=encode(ev),
    ...                          partition=0, offset=i, timestamp_ms=None))
    >>> _ = w.flush()
    >>> [(r.ts, r.key) for r in read_archive(d)]
    [(3600.0, b'j1'), (7200.0, b'j0')]
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dprobe.errors import UsageError
from dprobe.sinks.archive_schema import KINDS, SCHEMAS
from dprobe.sinks.parquet_archive import NAME_RE, ArchiveFile, list_files
from dprobe.traces.archive_hours import check_in_hour, hour_start
from dprobe.traces.replay_record import ReplayRecord
from dprobe.traces.row_input import MAX_EPOCH_S, MIN_EPOCH_S, neither_file_nor_folder

_COLUMNS = ["ts", "partition", "offset", "key", "value"]
_NOT_NULL = ("partition", "offset", "value")


def _binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


# What each column must be, as (test of its Arrow type, the words of an error).
_TYPES = {
    "ts": (lambda t: pa.types.is_floating(t) or pa.types.is_integer(t), "a number"),
    "partition": (pa.types.is_integer, "an integer"),
    "offset": (pa.types.is_integer, "an integer"),
    "key": (lambda t: _binary(t) or pa.types.is_null(t), "bytes"),
    "value": (_binary, "bytes"),
}


def archive_files(path: str | Path) -> list[ArchiveFile]:
    """The archive files ``path`` names (a file, a topic folder, one of its ``date=``
    or ``hour=`` folders, or the archive folder)."""
    p = Path(path)
    if p.is_file():
        m = NAME_RE.match(p.name)
        if not m or m["kind"] not in KINDS:
            raise UsageError(f"{p}: not a dprobe archive file (KIND-pN-oFIRST-oLAST.parquet)")
        return [ArchiveFile(p, m["kind"], int(m["partition"]), int(m["first"]), int(m["last"]))]
    if not p.is_dir():
        raise UsageError(f"{p}: {neither_file_nor_folder(p)}")
    topic = p.parent if p.name.startswith("date=") else p.parent.parent
    if p.name.startswith(("date=", "hour=")) and topic.name in KINDS:  # a day or an hour
        files = [f for f in list_files(topic.parent, topic.name) if p in f.path.parents]
    elif p.name in KINDS and not any((p / k).is_dir() for k in KINDS):
        files = list(list_files(p.parent, p.name))
    else:
        files = list(list_files(p))
    if not files:
        raise UsageError(f"{p}: holds no dprobe archive files (samples/date=*/hour=*/*.parquet)")
    return files


def count_records(files: list[ArchiveFile]) -> int:
    """Records in ``files``, from the Parquet footers (no data read); an unreadable footer
    is a ``UsageError`` naming the file. A record stored in two files counts once where the
    files say so, as :func:`read_archive` reads it once: a file whose rows fill its offset
    range (``oFIRST-oLAST``, the rule for Kafka's plain topics) adds only the offsets that
    no file of the same hour before it covered (a copy has its record's event time, so its
    hour; the same offset in another hour is another record: a topic made anew).

    >>> from pathlib import Path
    >>> import tempfile
    >>> from dprobe.schema import JobEvent, encode
    >>> from dprobe.sinks.archive_schema import row_of
    >>> from dprobe.sinks.parquet_archive import ArchiveWriter
    >>> d = tempfile.mkdtemp()
    >>> for offsets in ([0, 1, 2], [1, 2, 3]):  # two archivers flushed offsets 1-2
    ...     w = ArchiveWriter(d, fsync=False)
    ...     for i in offsets:
    ...         ev = JobEvent(ts=60.0 * i, event="submit", job=f"j{i}", tenant="a", gpus=1)
    ...         w.add("jobs", row_of("jobs", ev, key=None, value=encode(ev),
    ...                              partition=0, offset=i, timestamp_ms=None))
    ...     _ = w.flush()
    >>> count_records(archive_files(d)), len(list(read_archive(d)))
    (4, 4)
    """
    total = 0
    covered: dict[tuple[str, int, str, str], list[tuple[int, int]]] = defaultdict(list)
    for f in sorted(files, key=lambda f: (f.kind, f.partition, f.first, f.last)):
        try:
            meta = pq.ParquetFile(f.path).metadata
        except (OSError, ValueError) as exc:
            raise UsageError(f"{f.path}: unreadable Parquet file: {exc}") from None
        rows = meta.num_rows
        if (span := _ts_span(meta)) is not None:
            check_in_hour(f.path, *span)
        if rows == f.last - f.first + 1:
            key = (f.kind, f.partition, f.path.parent.parent.name, f.path.parent.name)
            spans = covered[key]
            rows -= sum(max(0, min(hi, f.last) - max(lo, f.first) + 1) for lo, hi in spans)
            covered[key] = _merged([*spans, (f.first, f.last)])
        total += rows
    return total


def _ts_span(meta: pq.FileMetaData) -> tuple[float, float] | None:
    """The least and greatest ``ts`` of a file, from its footer's statistics (``None``
    when a row group has none: the rows are checked as they are read)."""
    lows, highs = [], []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        col = next(
            (group.column(c) for c in range(group.num_columns)
             if group.column(c).path_in_schema == "ts"),
            None,
        )  # fmt: skip
        stats = col.statistics if col is not None else None
        if stats is None or not stats.has_min_max:
            return None
        lows.append(stats.min)
        highs.append(stats.max)
    if not lows or not all(isinstance(x, (int, float)) for x in [*lows, *highs]):
        return None
    return float(min(lows)), float(max(highs))


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges as disjoint ones.

    >>> _merged([(0, 4), (2, 9), (11, 12)])
    [(0, 9), (11, 12)]
    """
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def read_archive(
    path: str | Path, files: list[ArchiveFile] | None = None
) -> Iterator[ReplayRecord]:
    """Every archived record under ``path`` in event-time order (ties: ``cluster`` first,
    then partition, topic and offset)."""
    by_hour: dict[float, list[ArchiveFile]] = defaultdict(list)
    for f in files if files is not None else archive_files(path):
        start = hour_start(f.path)  # hour=4 before hour=10
        by_hour[-math.inf if start is None else start].append(f)  # one file: no hour
    for hour in sorted(by_hour):
        rows: list[tuple[float, int, int, int, int, bytes | None, bytes, str]] = []
        for f in by_hour[hour]:
            d = _columns(f.path, f.kind)
            _check_rows_in_hour(f.path, d["ts"])
            lead, rank = _order(f.kind)
            rows += [
                (ts, lead, part, rank, off, key, value, f.kind)
                for ts, part, off, key, value in zip(
                    d["ts"], d["partition"], d["offset"], d["key"], d["value"], strict=True
                )
            ]
        rows.sort(key=lambda r: (r[0], r[1], r[2], r[3], r[4]))
        previous = None
        for ts, _lead, part, _rank, off, key, value, kind in rows:
            if (kind, part, off) == previous:
                continue  # the same Kafka record in two files: read once
            previous = (kind, part, off)
            yield ReplayRecord(ts, kind, key, value)  # type: ignore[arg-type]


def _check_rows_in_hour(path: Path, times: list[float]) -> None:
    """``UsageError`` naming the first row of ``path`` outside its folder's hour."""
    start = hour_start(path)
    if start is None:
        return
    bad = next((i for i, t in enumerate(times) if not start <= t < start + 3600), None)
    if bad is not None:
        check_in_hour(path, times[bad], times[bad], row=bad + 1)


def _order(kind: str) -> tuple[int, int]:
    """Tie-breaks of ``kind`` at one event time: before every partition (``cluster``: the
    quotas the demand of that instant is planned against), and within a partition.

    >>> sorted(["jobs", "samples", "cluster"], key=_order)
    ['cluster', 'samples', 'jobs']
    """
    return (0 if kind == "cluster" else 1), KINDS.index(kind)


def _columns(path: Path, kind: str) -> dict[str, list[Any]]:
    """The replayed columns of one archive file, checked: ``UsageError`` naming the file
    (and the row) for a file that is not a dprobe archive file of ``kind``."""
    try:
        with pq.ParquetFile(path) as pf:
            have = pf.schema_arrow
            _check_kind(path, kind, set(have.names))
            missing = [c for c in _COLUMNS if c not in have.names]
            if missing:
                raise UsageError(
                    f"{path}: not a dprobe archive file: no column {', '.join(missing)}"
                )
            for name, (ok, what) in _TYPES.items():
                t = have.field(name).type
                if not ok(t):
                    raise UsageError(f"{path}: column {name} holds {t}, expected {what}")
            table = pf.read(columns=_COLUMNS)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{path}: unreadable Parquet file: {first}") from None
    for name in _NOT_NULL:
        column = table.column(name)
        if column.null_count:
            row = column.is_null().to_pylist().index(True)
            raise UsageError(f"{path}: row {row + 1}: {name} is null")
    d = table.to_pydict()
    bad = next((i for i, t in enumerate(d["ts"]) if not _epoch_s(t)), None)
    if bad is not None:
        raise UsageError(
            f"{path}: row {bad + 1}: ts must be a finite number of epoch seconds within "
            f"[{MIN_EPOCH_S:g}, {MAX_EPOCH_S:g}] (1970 .. 5138), got {d['ts'][bad]!r}"
        )
    return d


# The columns that tell a kind's files apart (all but those common to the three kinds).
_COMMON_NAMES = set.intersection(*(set(v.names) for v in SCHEMAS.values()))
_OWN = {k: set(SCHEMAS[k].names) - _COMMON_NAMES for k in KINDS}


def _check_kind(path: Path, kind: str, names: set[str]) -> None:
    """Refuse a file whose name gives one kind and whose columns are another's (a file
    renamed or copied into the wrong folder): its records would be decoded as the wrong
    messages and dropped one by one as invalid. A file with neither kind's own columns
    (written by another tool) is left to the column checks.

    >>> jobs = {"ts", "event", "job", "tenant", "gpus_requested"}
    >>> _check_kind(Path("samples-p0-o0-o1.parquet"), "samples", jobs)
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: samples-p0-o0-o1.parquet: holds jobs records (columns ...), not ...
    """
    if _OWN[kind] <= names:
        return
    for other in KINDS:
        if other != kind and _OWN[other] <= names:
            raise UsageError(
                f"{path}: holds {other} records (columns {', '.join(sorted(_OWN[other]))}), "
                f"not {kind}; move it to a {other} folder and name it {other}-..."
            )


def _epoch_s(x: object) -> bool:
    """Whether ``x`` is an event time the schema allows (not milliseconds, not NaN).

    >>> _epoch_s(1_590_000_000.0), _epoch_s(1_590_000_000_000), _epoch_s(float("nan"))
    (True, False, False)
    """
    return isinstance(x, (int, float)) and math.isfinite(x) and MIN_EPOCH_S <= x <= MAX_EPOCH_S
