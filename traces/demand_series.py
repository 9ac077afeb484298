"""Readers for per-tenant GPU demand series: ``demand-csv`` and ``helios-vc``.

Both yield :class:`DemandPoint` records (one tenant at one instant) in file order, with
the source file and line number kept, so a replay or an evaluation can say exactly which
line was bad. A bad line raises :class:`TraceFormatError` (a ``UsageError``: exit 2).

Formats (DESIGN.md §8):

- ``demand-csv``: header ``ts,tenant,demand_gpus[,quota_gpus]``. ``ts`` is epoch seconds
  or ISO-8601; an ISO time without a zone is read as UTC. ``demand_gpus`` is what the
  tenant runs plus what it waits for; running/pending are not split in this format, so
  the whole demand is reported as running.
- ``helios-vc``: a Helios per-VC minute CSV (Hu et al., SC'21), one file per virtual
  cluster; tenant = file stem (``vc6YE.csv.gz`` -> ``vc6YE``); running =
  ``running_gpu_num``, pending = ``pending_gpu_num``, quota = ``total_gpu_num``.
  ``Time`` (any case) is local cluster time without a zone and is read as UTC (an assumption that
  only shifts calendar features). ``.gz`` files are read transparently.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "d.csv"
    >>> _ = p.write_text("ts,tenant,demand_gpus\\n0,a,8\\n60,a,16\\n")
    >>> [(pt.ts, pt.tenant, pt.demand_gpus) for pt in read_demand_csv(p)]
    [(0.0, 'a', 8.0), (60.0, 'a', 16.0)]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from dprobe.errors import UsageError
from dprobe.time_text import utc_text
from dprobe.traces.row_input import (
    CSV_SUFFIXES,
    MAX_EPOCH_S,
    MAX_GAP_S,
    MAX_TENANT_CHARS,
    MIN_EPOCH_S,
    ErrorAt,
    OnBad,
    csv_rows,
    neither_file_nor_folder,
    open_text,
    parsed_rows,
    shown,
    twice_named,
    unfit_name,
)

TraceFormat = Literal["demand-csv", "helios-vc"]
FORMATS: tuple[TraceFormat, ...] = ("demand-csv", "helios-vc")


class TraceFormatError(UsageError):
    """A trace file does not follow its format; ``str()`` names the file and line.

    >>> str(TraceFormatError("bad number", path="a.csv", line=3))
    'a.csv:3: bad number'
    """

    def __init__(self, message: str, *, path: str | Path, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


@dataclass(frozen=True, slots=True)
class DemandPoint:
    """GPU demand of one tenant at one instant (``ts`` epoch seconds, UTC).

    ``demand_gpus`` = ``running_gpus + pending_gpus`` (what quota must cover).
    """

    ts: float
    tenant: str
    running_gpus: float
    pending_gpus: float
    quota_gpus: float | None = None
    path: str = ""
    line: int = 0

    @property
    def demand_gpus(self) -> float:
        return self.running_gpus + self.pending_gpus


# A tenant's demand beyond this many GPUs is a typo or an attack (replay would make one
# synthetic host per 8 GPUs); times outside the schema's bounds (1970 to the year 5138)
# would be dead-lettered by the worker and overflow calendar maths.
MAX_TENANT_GPUS = 1_000_000
MAX_TIME_S = MAX_EPOCH_S


def parse_ts(text: str) -> float:
    """Epoch seconds from epoch seconds or ISO-8601 text (no zone = UTC), within the
    schema's bounds (0 to 1e11 s); ``ValueError`` otherwise.

    >>> parse_ts("1590000000"), parse_ts("2020-05-22 00:00:00")
    (1590000000.0, 1590105600.0)
    >>> parse_ts("2020-05-22T08:00:00+08:00")
    1590105600.0
    >>> parse_ts("9999-12-31")
    Traceback (most recent call last):
    ...
    ValueError: not epoch seconds or ISO-8601 within 1970-01-01 .. 5138-11-16: '9999-12-31'
    """
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"not epoch seconds or ISO-8601: {text!r}") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        value = dt.timestamp()
    if not (math.isfinite(value) and MIN_EPOCH_S <= value <= MAX_TIME_S):
        raise ValueError(f"not epoch seconds or ISO-8601 within 1970-01-01 .. 5138-11-16: {text!r}")
    return value


def _gpus(text: str, column: str, path: Path, line: int) -> float:
    return gpu_count(text, column, line, lambda m, n: TraceFormatError(m, path=path, line=n))


def gpu_count(text: str, column: str, line: int, error: ErrorAt) -> float:
    """A GPU count of a trace row: finite, within [0, :data:`MAX_TENANT_GPUS`]; else
    ``error(message, line)`` naming the column and the (cut short) field.

    >>> from dprobe.traces.row_input import at_line
    >>> gpu_count("8", "running_gpu_num", 2, at_line("vcA.csv"))
    8.0
    """
    try:
        value = float(text)
    except ValueError:
        raise error(f"{column}: not a number: {shown(text)}", line) from None
    if not math.isfinite(value) or not 0 <= value <= MAX_TENANT_GPUS:
        raise error(
            f"{column}: must be a number within [0, {MAX_TENANT_GPUS}], got {shown(text)}", line
        )
    return value


def _rows(
    path: Path,
    required: Iterable[str],
    *,
    optional: Iterable[str] = (),
    fold_case: bool = False,
    on_bad: OnBad | None = None,
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for every data row; checks the header names ``required``, and
    names each of them and of the ``optional`` columns read at most once (which of two
    ``demand_gpus`` columns would be the demand?).

    ``fold_case`` lower-cases the header first (Helios files spell ``Time`` or ``time``).
    A bad row raises, or with ``on_bad`` is passed to it and skipped.
    """
    try:
        fh = open_text(path)
    except OSError as exc:
        raise TraceFormatError(f"cannot open: {exc.strerror or exc}", path=path) from None
    with fh:
        rows = csv_rows(
            fh,
            name=str(path),
            error=lambda msg, n: TraceFormatError(msg, path=path, line=n),
            on_bad=on_bad,
        )
        _, header = next(rows, (1, None))
        if header is None:
            raise TraceFormatError("empty file (no header)", path=path, line=1)
        spelt = [h.strip() for h in header]  # as the file spells them, for messages
        header = [h.lower() for h in spelt] if fold_case else spelt
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceFormatError(
                f"header lacks column(s) {', '.join(missing)} (found: {', '.join(spelt)})",
                path=path,
                line=1,
            )
        if twice := twice_named(header, [*required, *optional]):
            raise TraceFormatError(twice, path=path, line=1)

        def fields(line: int, row: list[str]) -> tuple[int, dict[str, str]] | None:
            if not row or (len(row) == 1 and not row[0].strip()):
                return None
            if len(row) != len(header):
                raise TraceFormatError(
                    f"expected {len(header)} fields, found {len(row)}", path=path, line=line
                )
            return line, dict(zip(header, row, strict=True))

        yield from parsed_rows(rows, fields, on_bad)


def read_demand_csv(path: str | Path, *, on_bad: OnBad | None = None) -> Iterator[DemandPoint]:
    """Points of a ``demand-csv`` file (``ts,tenant,demand_gpus[,quota_gpus]``).

    A bad row raises; with ``on_bad`` it is passed to it (``FILE:LINE: why``) and skipped.
    """
    p = Path(path)

    def point(line: int, row: dict[str, str]) -> DemandPoint:
        try:
            ts = parse_ts(row["ts"])
        except ValueError as exc:
            raise TraceFormatError(f"ts: {exc}", path=p, line=line) from None
        tenant = row["tenant"].strip()
        if not tenant:
            raise TraceFormatError("tenant: empty", path=p, line=line)
        if problem := unfit_name(tenant, "tenant", MAX_TENANT_CHARS):
            raise TraceFormatError(problem, path=p, line=line)
        quota_text = row.get("quota_gpus", "").strip()
        quota = _gpus(quota_text, "quota_gpus", p, line) if quota_text else None
        return DemandPoint(
            ts=ts,
            tenant=tenant,
            running_gpus=_gpus(row["demand_gpus"], "demand_gpus", p, line),
            pending_gpus=0.0,
            quota_gpus=quota,
            path=str(p),
            line=line,
        )

    rows = _rows(p, ("ts", "tenant", "demand_gpus"), optional=("quota_gpus",), on_bad=on_bad)
    return parsed_rows(rows, point, on_bad)


def tenant_of(path: str | Path) -> str:
    """Tenant name of a per-VC file: the file name without ``.csv``/``.csv.gz``.

    >>> tenant_of("/data/vc6YE.csv.gz")
    'vc6YE'
    """
    name = Path(path).name
    for suffix in (".csv.gz", ".gz", ".csv"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def read_helios_vc(path: str | Path, *, on_bad: OnBad | None = None) -> Iterator[DemandPoint]:
    """Points of one Helios per-VC minute CSV; tenant = file stem.

    A bad row raises; with ``on_bad`` it is passed to it (``FILE:LINE: why``) and skipped.
    """
    p = Path(path)
    tenant = tenant_of(p)
    if problem := unfit_name(tenant, "tenant (the file name)", MAX_TENANT_CHARS):
        raise TraceFormatError(problem, path=p)

    def point(line: int, row: dict[str, str]) -> DemandPoint:
        try:
            ts = parse_ts(row["time"])
        except ValueError as exc:
            raise TraceFormatError(f"time: {exc}", path=p, line=line) from None
        quota_text = row.get("total_gpu_num", "").strip()
        return DemandPoint(
            ts=ts,
            tenant=tenant,
            running_gpus=_gpus(row["running_gpu_num"], "running_gpu_num", p, line),
            pending_gpus=_gpus(row["pending_gpu_num"], "pending_gpu_num", p, line),
            quota_gpus=_gpus(quota_text, "total_gpu_num", p, line) if quota_text else None,
            path=str(p),
            line=line,
        )

    rows = _rows(
        p,
        ("time", "running_gpu_num", "pending_gpu_num"),
        optional=("total_gpu_num",),
        fold_case=True,
        on_bad=on_bad,
    )
    return parsed_rows(rows, point, on_bad)


def trace_files(path: str | Path, fmt: TraceFormat) -> list[Path]:
    """The files ``path`` names: itself, or the sorted ``.csv``/``.csv.gz`` files of a folder.

    For ``helios-vc`` folders, files that are not per-VC series (no ``vc`` prefix, such as
    ``earth_gpu_number.csv``) are skipped, and a VC in two files (``vcA.csv`` beside
    ``vcA.csv.gz``) is an error naming both: its minutes would be read twice.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise TraceFormatError(neither_file_nor_folder(p), path=p)
    files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(CSV_SUFFIXES))
    if fmt == "helios-vc":
        files = [f for f in files if f.name.startswith("vc")]
        seen: dict[str, Path] = {}
        for f in files:
            if (tenant := tenant_of(f)) in seen:
                raise TraceFormatError(
                    f"VC {tenant} is in two files: {seen[tenant].name} and {f.name}; keep one",
                    path=p,
                )
            seen[tenant] = f
    if not files:
        names = "vc*.csv or vc*.csv.gz" if fmt == "helios-vc" else ".csv or .csv.gz"
        raise TraceFormatError(f"folder holds no {fmt} files ({names})", path=p)
    return files


def read_file(
    path: str | Path, fmt: TraceFormat, *, on_bad: OnBad | None = None
) -> Iterator[DemandPoint]:
    """Points of one file of format ``fmt``, in file order (``on_bad``: skip bad rows)."""
    if fmt == "demand-csv":
        return read_demand_csv(path, on_bad=on_bad)
    if fmt == "helios-vc":
        return read_helios_vc(path, on_bad=on_bad)
    raise UsageError(f"unknown trace format {fmt!r} (choose from {', '.join(FORMATS)})")


def read_trace(
    path: str | Path, fmt: TraceFormat, *, on_bad: OnBad | None = None
) -> Iterator[DemandPoint]:
    """Points of a file or folder, merged in time order across files (ties keep file order).

    Each file must itself be in time order (both formats are), with one point per tenant
    and time; a point earlier than the previous one of the same file, over
    :data:`MAX_GAP_S` (a year) after it, or a second one of its tenant at the same time,
    raises :class:`TraceFormatError`, or with ``on_bad`` is
    passed to it and skipped, like every bad row. The files of a folder are one trace: a
    point over a year after the one before it in any file, or a second one of its tenant
    at the same time in another file, is refused too.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.csv").write_text("ts,tenant,demand_gpus\\n0,a,1\\n120,a,2\\n")
    >>> _ = (d / "b.csv").write_text("ts,tenant,demand_gpus\\n60,b,5\\n")
    >>> [(p.ts, p.tenant) for p in read_trace(d, "demand-csv")]
    [(0.0, 'a'), (60.0, 'b'), (120.0, 'a')]
    """
    streams = [
        _in_time_order(read_file(f, fmt, on_bad=on_bad), on_bad) for f in trace_files(path, fmt)
    ]
    if len(streams) == 1:
        return streams[0]
    return _across_files(heapq.merge(*streams, key=lambda pt: pt.ts), on_bad)


def _across_files(points: Iterator[DemandPoint], on_bad: OnBad | None) -> Iterator[DemandPoint]:
    """The merged points of several files, each file's rows already checked
    (:func:`_in_time_order`), checked as one trace: no jump of over a year, one point per
    tenant and time, each found named by its file and line and the other row's."""
    last: DemandPoint | None = None
    at: dict[str, DemandPoint] = {}  # each tenant's point at the time of ``last``

    def checked(line: int, pt: DemandPoint) -> DemandPoint:
        nonlocal last
        if last is not None and pt.ts - last.ts > MAX_GAP_S:
            raise TraceFormatError(
                f"time jumps {(pt.ts - last.ts) / 86_400:,.0f} days after "
                f"{last.path}:{last.line}'s ({_when(pt.ts)} after {_when(last.ts)}); "
                f"{'row skipped' if on_bad else 'a digit too many?'}",
                path=pt.path,
                line=line,
            )
        if last is None or pt.ts > last.ts:
            at.clear()
        elif (other := at.get(pt.tenant)) is not None:
            raise TraceFormatError(
                f"tenant {pt.tenant} has a row at this time on {other.path}:{other.line} "
                f"({_when(pt.ts)}); {'row skipped' if on_bad else 'keep one of them'}",
                path=pt.path,
                line=line,
            )
        last = pt
        at[pt.tenant] = pt
        return pt

    return parsed_rows(((pt.line, pt) for pt in points), checked, on_bad)


def _when(ts: float) -> str:
    """A row's time as UTC and as the epoch seconds it was read as.

    >>> _when(1585699800.0)
    '2020-04-01T00:10:00Z (1585699800 s)'
    """
    when = utc_text(ts)
    return when if when.endswith(" s") else f"{when} ({ts:.0f} s)"


def _in_time_order(points: Iterator[DemandPoint], on_bad: OnBad | None) -> Iterator[DemandPoint]:
    last = -math.inf
    then = "row skipped" if on_bad else "sort the file by time"
    at: dict[str, int] = {}  # the line of each tenant's row at time ``last``
    last_line = 0

    def ordered(line: int, pt: DemandPoint) -> DemandPoint:
        nonlocal last, last_line
        if pt.ts < last:
            raise TraceFormatError(
                f"time goes backwards ({_when(pt.ts)} after {_when(last)}); {then}",
                path=pt.path,
                line=line,
            )
        # a typo, most likely: a replay would send snapshots every tick across the gap
        if last_line and pt.ts - last > MAX_GAP_S:
            raise TraceFormatError(
                f"time jumps {(pt.ts - last) / 86_400:,.0f} days after line {last_line}'s "
                f"({_when(pt.ts)} after {_when(last)}); "
                f"{'row skipped' if on_bad else 'a digit too many?'}",
                path=pt.path,
                line=line,
            )
        if pt.ts > last:
            at.clear()
        elif pt.tenant in at:  # which of the two demands would hold at that time?
            raise TraceFormatError(
                f"tenant {pt.tenant} has a row at this time on line {at[pt.tenant]} "
                f"({_when(pt.ts)}); {'row skipped' if on_bad else 'keep one of them'}",
                path=pt.path,
                line=line,
            )
        last, last_line = pt.ts, line
        at[pt.tenant] = line
        return pt

    return parsed_rows(((pt.line, pt) for pt in points), ordered, on_bad)
