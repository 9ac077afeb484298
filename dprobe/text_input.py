"""Read a small text input file (settings, VC sizes, co-location tables) whole, turning
every way that can fail into one :class:`~dprobe.errors.UsageError` line.

A directory, an unreadable file, a file larger than ``max_bytes`` (a sparse file or a
mistake that would exhaust memory) and bytes that are not UTF-8 (a binary or gzip file
where text was expected) are each named with the path, and with the line for bad UTF-8.
A leading byte-order mark (Windows editors write one) is dropped: it is not part of the
text, and left in it would glue itself to the first key or column name. A file whose name
ends in ``.gz`` is decompressed (``max_bytes`` bounds what it decompresses to), as the
trace readers read a ``.csv.gz``.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "vcs.csv"
    >>> _ = p.write_bytes(b"vc,node num\\nvc-a,\\xff\\n")
    >>> read_text(p)
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: ...vcs.csv:2: not UTF-8 text (invalid start byte)
"""

from __future__ import annotations

import codecs
import gzip
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from dprobe.errors import UsageError

MAX_TEXT_BYTES = 64 << 20  # settings, VC and co-location files are kilobytes


def read_text(
    path: str | Path,
    *,
    max_bytes: int = MAX_TEXT_BYTES,
    error: type[UsageError] = UsageError,
    what: str = "",
) -> str:
    """The UTF-8 text of ``path`` (decompressed when it ends in ``.gz``); ``error`` (one
    line, naming ``what`` + path) otherwise."""
    p = Path(path)
    name = f"{what}{p}"
    try:
        if p.is_dir():
            raise error(f"{name}: cannot read: Is a directory")
        with gzip.open(p, "rb") if p.name.endswith(".gz") else p.open("rb") as f:
            raw = f.read(max_bytes + 1)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # damaged or cut short
        raise error(f"{name}: unreadable: {exc}") from None
    except OSError as exc:
        raise error(cannot_read(name, exc)) from None
    if len(raw) > max_bytes:
        raise error(f"{name}: larger than {max_bytes} bytes; not a file of this kind")
    body = raw.removeprefix(codecs.BOM_UTF8)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = body[: exc.start].count(b"\n") + 1
        raise error(f"{name}:{line}: not UTF-8 text ({exc.reason})") from None


def cannot_read(name: str, exc: OSError) -> str:
    """Why the file ``name`` could not be opened, as every input of dprobe says it.

    >>> cannot_read("vcs.csv", FileNotFoundError(2, "No such file or directory"))
    'vcs.csv: no such file'
    >>> cannot_read("vcs.csv", PermissionError(13, "Permission denied"))
    'vcs.csv: cannot read: Permission denied'
    """
    if isinstance(exc, FileNotFoundError):
        return f"{name}: no such file"
    return f"{name}: cannot read: {exc.strerror or exc}"


# C0 and C1 control characters and the two Unicode line separators (str.splitlines splits
# on them): none belongs in a name that reaches logs, metric labels or a terminal.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def has_control_character(value: str) -> bool:
    """True when ``value`` holds a control character or a line separator.

    >>> [has_control_character(s) for s in ("vc-a", "vc\\ta", "a\\x85", "a\\u2028")]
    [False, True, True, True]
    """
    return _CONTROL.search(value) is not None


MAX_LINE_CHARS = 1 << 20  # no line of a trace or table is near this long


class LineTooLong(UsageError):
    """A line of a text input is longer than any real one (not a row to skip)."""


def bounded_lines(
    fh: Iterable[str] | IO[str],
    *,
    name: str,
    max_chars: int = MAX_LINE_CHARS,
) -> Iterator[str]:
    """The lines of the text file ``fh``, read at most ``max_chars`` at a time: a line
    longer than that (a binary blob, a decompression bomb of one endless line) is
    :class:`LineTooLong` naming ``name`` and the line number, before it fills memory.

    >>> import io
    >>> list(bounded_lines(io.StringIO("a,b\\n1,2\\n"), name="t.csv"))
    ['a,b\\n', '1,2\\n']
    >>> list(bounded_lines(io.StringIO("a,b\\n" + "9" * 50), name="t.csv", max_chars=10))
    Traceback (most recent call last):
    ...
    dprobe.text_input.LineTooLong: t.csv:2: line longer than 10 characters
    """
    readline = getattr(fh, "readline", None)
    if readline is None:  # an iterable of lines already in memory
        yield from fh
        return
    n = 0
    while True:
        line = readline(max_chars + 1)
        if not line:
            return
        n += 1
        if len(line) > max_chars:
            raise LineTooLong(f"{name}:{n}: line longer than {max_chars} characters")
        yield line
