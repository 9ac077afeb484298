"""Skip malformed rows of a strict trace reader, naming file and line of each.

The trace readers (:mod:`dprobe.traces.demand_series`, :mod:`dprobe.traces.jobs_csv`)
raise at the first bad row. :func:`skip_bad_rows` turns that into "skip the row, count it,
go on": on an error that names a data line, it gives the reader a copy of the file with
every line up to that one blanked (line numbers unchanged) and continues. Errors without
a data line (cannot open, bad header) still raise. Each bad row costs one copy of the
rest of the file, which is cheap for the handful of bad rows real traces have.

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
import gzip
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from dprobe.errors import UsageError
from dprobe.text_input import LineTooLong, bounded_lines

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
                done_through = bad_line
                source = _blanked_copy(original, Path(tmp), through=bad_line)


def _blanked_copy(path: Path, folder: Path, *, through: int) -> Path:
    """A plain-text copy of ``path`` with lines 2..``through`` blank (same line numbers,
    same file stem, so a reader that names the tenant by the file sees the same name)."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    out = folder / name
    opener = gzip.open if path.name.endswith(".gz") else open
    with (
        opener(path, "rt", encoding="utf-8", newline="") as src,
        open(out, "w", encoding="utf-8", newline="") as dst,
    ):
        lines = bounded_lines(src, name=str(path))
        dst.write(next(lines, ""))
        dst.write("\n" * (through - 1))
        for n, text in enumerate(lines, start=2):
            if n > through:
                dst.write(text)
    return out
