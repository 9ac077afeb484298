"""What every trace and table reader shares: CSV rows that name their line when bad, and
the bounds the message schema puts on the names and times a row may hold.

The readers (``demand-csv``, ``helios-vc``, ``jobs-csv``, the VC sizes of ``simulate`` and
the quotas of ``cluster publish``) read through :func:`csv_rows`, so each way a file can be
bad is one error naming the file and the line:

- a byte that is not UTF-8 (files are decoded with ``surrogateescape`` by
  :func:`open_text`, so one bad byte leaves the other lines readable and a lenient replay
  can skip its row);
- a CSV syntax error, or a field over Python's csv limit (128 KiB; no real field is near it);
- a quote that is never closed (the csv module would read every line after it, up to its
  field limit or the end, as one field): the line it opens on is bad, and the lines
  after it are read as rows of their own;
- a line over :data:`~dprobe.text_input.MAX_LINE_CHARS` (:class:`~dprobe.text_input.LineTooLong`);
- a compressed file cut short or damaged (the line it ended in).

A UTF-8 byte-order mark (spreadsheets write one) is dropped.

Names and times are checked against :mod:`dprobe.schema` where the line is known, so a
replay never publishes a record the stream worker would dead-letter. A replayed tenant also
names synthetic hosts and GPUs (:func:`replay_host`, :func:`replay_gpu`), so a tenant may
be at most :data:`MAX_TENANT_CHARS` long.

Example:
    >>> import io
    >>> list(csv_rows(io.StringIO("\\ufeffts,tenant\\n0,a\\n"), name="d.csv"))
    [(1, ['ts', 'tenant']), (2, ['0', 'a'])]
    >>> list(csv_rows(io.StringIO("ts,tenant\\n0,\\udcff\\n"), name="d.csv"))
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: d.csv:2: not UTF-8 text (byte 0xff)
"""

from __future__ import annotations

import csv
import gzip
import re
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Final, TypeVar, get_args

from dprobe.errors import UsageError
from dprobe.schema import EpochS, Id, Label
from dprobe.text_input import bounded_lines, has_control_character

ErrorAt = Callable[[str, int], UsageError]
"""Makes the error of a bad line from a message and a line number."""

OnBad = Callable[[str], None]
"""Takes the message (``FILE:LINE: why``) of a bad row that a lenient read skips."""

T = TypeVar("T")
R = TypeVar("R")

MAX_ID_CHARS: Final[int] = get_args(Id)[1].max_length  # tenant, job, host names: 256
MAX_LABEL_CHARS: Final[int] = get_args(Label)[1].max_length  # model names: 256
MIN_EPOCH_S: Final[float] = get_args(EpochS)[1].ge  # 0
MAX_EPOCH_S: Final[float] = get_args(EpochS)[1].le  # 1e11 s, the year 5138
CSV_SUFFIXES: Final = (".csv", ".csv.gz")  # the trace files a folder is read for
# The most a trace's time may move on with nothing in between (rows of a series, jobs that
# all ended): beyond it a time is a typo, such as a digit too many.
MAX_GAP_S: Final[float] = 366 * 86_400.0

_UNDECODED = re.compile("[\udc80-\udcff]")  # how surrogateescape keeps a non-UTF-8 byte


def open_text(path: Path) -> IO[str]:
    """``path`` as text for :func:`csv_rows` (gzip when it ends in ``.gz``); a byte that is
    not UTF-8 is kept for :func:`csv_rows` to name its line. ``OSError`` when unreadable."""
    opener = gzip.open if path.name.endswith(".gz") else open
    return opener(path, "rt", encoding="utf-8", errors="surrogateescape", newline="")


def neither_file_nor_folder(path: Path) -> str:
    """Why ``path``, which is neither a regular file nor a folder, is no trace.

    >>> neither_file_nor_folder(Path("/nonexistent/d.csv"))
    'no such file or folder'
    >>> neither_file_nor_folder(Path("/dev/null"))
    'not a regular file or folder'
    """
    try:
        path.stat()
    except FileNotFoundError:
        return "no such file or folder"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return "not a regular file or folder"


def at_line(name: str) -> ErrorAt:
    """Errors that read ``NAME:LINE: message``, the form of every trace reader."""
    return lambda message, line: UsageError(f"{name}:{line}: {message}")


def csv_rows(
    lines: Iterable[str] | IO[str],
    *,
    name: str,
    error: ErrorAt | None = None,
    on_bad: OnBad | None = None,
) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of every CSV record of ``lines`` (an open text file or
    lines), the header included; a blank line is ``[]``. A bad line raises ``error``
    (default :func:`at_line`) naming it; with ``on_bad``, a bad record after the header is
    passed to it as a message and skipped whole instead (a line too long still raises). A
    record over several lines (a quoted line break) has its last line's number. A quote
    that is never closed (the file or the csv module's field limit ends first) is a bad
    record of the line it opens on, and the lines after that one are read again as
    records of their own, so a stray quote costs one row, not every row up to the end.

    >>> bad = []
    >>> list(csv_rows(["ts,n\\n", '0,"1\\n', "60,2\\n"], name="d.csv", on_bad=bad.append)), bad
    ([(1, ['ts', 'n']), (3, ['60', '2'])], ['d.csv:2: a quote opened on this line is not closed'])
    """
    fail = error or at_line(name)
    undecoded: dict[int, UsageError] = {}  # lines with a byte that is not UTF-8 (on_bad)
    feed = _RecordLines(_checked(lines, name, fail, undecoded if on_bad else None))
    reader = csv.reader(feed)
    while True:
        feed.new_record()
        row: list[str] = []
        problem = None
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a field over the limit
            problem = f"not valid CSV ({exc})"
        first, last = feed.first, feed.last
        if feed.ended_in_quote or (problem and last > first):  # a quote never closed
            bad: UsageError | None = fail("a quote opened on this line is not closed", first)
            feed.read_again_after_first()
            last = first
        else:
            bad = None if problem is None else fail(problem, last)
        if on_bad is not None and undecoded:  # a line that is not UTF-8 is named as such
            found = _pop_through(undecoded, last)
            if any(n >= first for n in found):
                bad = found[min(n for n in found if n >= first)]
        if bad is None:
            yield last, row
            continue
        if on_bad is None or first <= 1:
            raise bad from None
        on_bad(str(bad))


class _RecordLines:
    """The lines for a ``csv.reader``, numbered from 1, with the lines of the record being
    read (:attr:`first` to :attr:`last`). When the lines end inside a quoted field the
    reader is told the input ended (it then gives the record read so far) and
    :attr:`ended_in_quote` is set; :meth:`read_again_after_first` hands the lines after
    the record's first line out again."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self._again: deque[tuple[int, str]] = deque()  # (number, line) to hand out first
        self._record: list[tuple[int, str]] = []
        self._count = 0
        self.ended_in_quote = False

    @property
    def first(self) -> int:
        return self._record[0][0] if self._record else self._count + 1

    @property
    def last(self) -> int:
        return self._record[-1][0] if self._record else self._count

    def new_record(self) -> None:
        self._record = []
        self.ended_in_quote = False

    def read_again_after_first(self) -> None:
        self._again.extendleft(reversed(self._record[1:]))
        del self._record[1:]

    def __iter__(self) -> _RecordLines:
        return self

    def __next__(self) -> str:
        if self._again:
            item = self._again.popleft()
        else:
            try:
                text = next(self._lines)
            except StopIteration:
                self.ended_in_quote = bool(self._record)  # asked for more within a record
                raise
            self._count += 1
            item = (self._count, text)
        self._record.append(item)
        return item[1]


def _pop_through(errors: dict[int, UsageError], line: int) -> dict[int, UsageError]:
    """The errors of lines up to ``line``, taken out of ``errors``."""
    found = {n: e for n, e in errors.items() if n <= line}
    for n in found:
        del errors[n]
    return found


def _checked(
    lines: Iterable[str] | IO[str],
    name: str,
    fail: ErrorAt,
    undecoded: dict[int, UsageError] | None,
) -> Iterator[str]:
    """The lines, checked: a byte that is not UTF-8 raises, or with ``undecoded`` is
    noted there by line and shown as U+FFFD (quotes and line ends stay, so the record it
    is in is read whole and then skipped). A compressed file cut short or damaged raises,
    naming the line it ended in."""
    n = 0
    try:
        for n, text in enumerate(bounded_lines(lines, name=name), start=1):
            line = text.removeprefix("\ufeff") if n == 1 else text
            bad = _UNDECODED.search(line)
            if bad:
                err = fail(f"not UTF-8 text (byte 0x{ord(bad[0]) - 0xDC00:02x})", n)
                if undecoded is None or n == 1:
                    raise err
                undecoded[n] = err
                line = _UNDECODED.sub("\ufffd", line)
            yield line
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise fail(f"unreadable: {exc}", n + 1) from None


def parsed_rows(
    rows: Iterable[tuple[int, R]],
    parse: Callable[[int, R], T | None],
    on_bad: OnBad | None = None,
) -> Iterator[T]:
    """``parse(line, row)`` of every row, ``None`` left out. A row ``parse`` refuses (a
    ``UsageError``) raises, or with ``on_bad`` is passed to it and skipped, so one pass
    reads a file with any number of bad rows.

    >>> def number(line, text):
    ...     if not text.isdigit():
    ...         raise UsageError(f"d.csv:{line}: not a number: {text!r}")
    ...     return int(text)
    >>> bad = []
    >>> list(parsed_rows([(2, "4"), (3, "x"), (4, "5")], number, bad.append)), bad
    ([4, 5], ["d.csv:3: not a number: 'x'"])
    """
    for line, row in rows:
        try:
            item = parse(line, row)
        except UsageError as exc:
            if on_bad is None:
                raise
            on_bad(str(exc))
            continue
        if item is not None:
            yield item


def field_count(row: list[str], header: list[str]) -> str:
    """What is wrong with a row of another length than its header.

    >>> field_count(["a"], ["ts", "tenant"])
    '1 field, the header has 2'
    """
    n = len(row)
    return f"{n} field{'' if n == 1 else 's'}, the header has {len(header)}"


def twice_named(header: list[str], read: Iterable[str]) -> str | None:
    """What is wrong with a header that names a column the reader reads more than once
    (which of the two holds the value?); ``None``: nothing. Columns it does not read may
    repeat.

    >>> twice_named(["ts", "tenant", "demand_gpus", "demand_gpus"], ["ts", "demand_gpus"])
    'header names column demand_gpus twice (fields 3 and 4)'
    >>> print(twice_named(["ts", "note", "note"], ["ts"]))
    None
    """
    for column in read:
        at = [i + 1 for i, h in enumerate(header) if h == column]
        if len(at) > 1:
            fields = ", ".join(map(str, at[:-1])) + f" and {at[-1]}"
            times = "twice" if len(at) == 2 else f"{len(at)} times"
            return f"header names column {column} {times} (fields {fields})"
    return None


def shown(text: str) -> str:
    """A field for an error line, cut short (a line may be a megabyte long).

    >>> shown("12"), shown("9" * 50)
    ("'12'", "'9999999999999999999999999999999999999999'...")
    """
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}..."


def replay_host(tenant: str, index: int) -> str:
    """The name of a replayed tenant's synthetic host ``index``.

    >>> replay_gpu(replay_host("vc-a", 0), 7)
    'GPU-replay-vc-a-000-7'
    """
    return f"replay-{tenant}-{index:03d}"


def replay_gpu(host: str, index: int) -> str:
    """The UUID of GPU ``index`` of a synthetic host."""
    return f"GPU-{host}-{index}"


# Room for a million hosts (a tenant's demand is at most 1e6 GPUs) of up to 4,096 GPUs
# (the schema's largest GPU index): 23 characters.
MAX_TENANT_CHARS: Final[int] = MAX_ID_CHARS - len(replay_gpu(replay_host("", 999_999), 4095))


def unfit_name(value: str, what: str, limit: int) -> str | None:
    """Why ``value`` cannot be the ``what`` (a tenant, job or model name) of a record:
    too long, or holding a control character (a tab or line break read from a trace would
    split log lines and reach metric labels and scheduler messages); ``None``: it can.

    >>> unfit_name("x" * 240, "tenant", MAX_TENANT_CHARS)
    'tenant is 240 characters, more than 233 (a replay names hosts and GPUs after it)'
    >>> print(unfit_name("vc\\x1b[31m", "user", MAX_TENANT_CHARS))
    user 'vc\\x1b[31m' holds a control character
    """
    if has_control_character(value):
        return f"{what} {value[:40]!r} holds a control character"
    if len(value) <= limit:
        return None
    why = " (a replay names hosts and GPUs after it)" if limit == MAX_TENANT_CHARS else ""
    return f"{what} is {len(value)} characters, more than {limit}{why}"
