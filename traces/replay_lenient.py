"""Skip malformed rows of a strict trace reader, naming file and line of each.

The trace readers (:mod:`dprobe.traces.demand_series`, :mod:`dprobe.traces.jobs_csv`)
raise at the first bad row. :func:`skip_bad_rows` turns that into "skip the row, count it,
go on": on an error that names a data line, it gives the reader a copy of the file with
that line blanked (line numbers unchanged) and reads it again from the start, passing on
only the rows after the last one it passed on. The reader so sees every row it accepted
before, and what it checks across rows (a job id used twice) still holds after a skip.
The lines between the last good row and the bad one are blanked too: they are blank or
the start of the bad record (a quoted field over several lines). Errors without a data
line (cannot open, bad header) still raise. Each bad row costs one more read of the file,
which is cheap for the handful of bad rows real traces have.

Example:
    >>> import tempfile, pathlib
    >>> from dprobe.traces.demand_series import read_demand_csv
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "d.csv"
    >>> _ = p.write_text("ts,tenant,demand_gpus\\n0,a,8\\n60,a,oops\\n120,a,4\\n")
    >>> bad = []
    >>> pts = list(skip_bad_rows(read_demand_csv, p, lambda pt: pt.line, bad.append))
    >>> [pt.demand_gpus for pt in pts], [msg.split(": ", 1)[1] for msg in bad]
    ([8.0, 4.0], ["demand_gpus: not a number: 'oops'"])
"""

from __future__ import annotations

import dataclasses
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from dprobe.errors import UsageError
from dprobe.text_input import LineTooLong, bounded_lines
from dprobe.traces.row_input import open_text

T = TypeVar("T")
_WHERE = re.compile(r"^(?P<path>.+?):(?P<line>\d+): ")


def error_line(exc: UsageError) -> int | None:
    """The line number an error names (``None`` when it names none).

    >>> error_line(UsageError("jobs.csv:7: empty job_id or user"))
    7
    """
    line = getattr(exc, "line", None)
    if isinstance(line, int):
        return line
    m = _WHERE.match(str(exc))
    return int(m["line"]) if m else None


def skip_bad_rows(
    read: Callable[[Path], Iterator[T]],
    path: str | Path,
    line_of: Callable[[T], int],
    on_bad: Callable[[str], None],
    *,
    strict: bool = False,
) -> Iterator[T]:
    """Items of ``read(path)`` in order; a row error is passed to ``on_bad`` and skipped.

    With ``strict`` the first row error is raised instead (a ``UsageError``: exit 2).
    """
    original = Path(path)
    source = original
    done_through = 0  # every line up to here was yielded or reported bad
    blank: list[tuple[int, int]] = []  # (first, last) lines of the bad rows
    with tempfile.TemporaryDirectory(prefix="dprobe-replay-") as tmp:
        while True:
            try:
                for found in read(source):
                    line = line_of(found)
                    if line <= done_through:
                        continue
                    item = found
                    if source != original and isinstance(getattr(found, "path", None), str):
                        item = dataclasses.replace(found, path=str(original))  # type: ignore[type-var]
                    yield item
                    done_through = line
                return
            except UsageError as exc:
                bad_line = error_line(exc)
                message = str(exc).replace(str(source), str(original))
                fatal = isinstance(exc, LineTooLong)  # re-reading it would not help
                if fatal or strict or bad_line is None or bad_line <= 1 or bad_line <= done_through:
                    if source == original:
                        raise
                    raise UsageError(message) from None
                on_bad(message)
                blank.append((done_through + 1, bad_line))
                done_through = bad_line
                source = _blanked_copy(original, Path(tmp), blank)


def _blanked_copy(path: Path, folder: Path, blank: list[tuple[int, int]]) -> Path:
    """A plain-text copy of ``path`` with the lines of the ``(first, last)`` ranges of
    ``blank`` blank (same line numbers, same file stem, so a reader that names the tenant
    by the file sees the same name). Bytes that are not UTF-8 are copied unchanged."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    out = folder / name
    with (
        open_text(path) as src,
        open(out, "w", encoding="utf-8", errors="surrogateescape", newline="") as dst,
    ):
        ranges = iter(blank)  # in line order, not overlapping
        first, last = 0, 0
        for n, text in enumerate(bounded_lines(src, name=str(path)), start=1):
            while n > last:
                first, last = next(ranges, (sys.maxsize, sys.maxsize))
            dst.write("\n" if first <= n and n > 1 else text)
    return out
