"""Log lines for the systemd journal, when a service's stderr is connected to it.

Under a unit (``infra/systemd/``) stderr goes to journald, which stamps every line with
its own time and reads a ``<N>`` prefix as the line's syslog priority. So there the
lines carry that prefix instead of a timestamp, and ``journalctl -p warning -u
dprobe-collector`` shows the warnings and errors only. Elsewhere (a terminal, a file,
a container's log) the lines are as before.

>>> import logging
>>> record = logging.LogRecord("dprobe.x", logging.WARNING, "", 0, "spool full", None, None)
>>> JournalFormatter().format(record)
'<4>WARNING dprobe.x: spool full'
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
import types
from collections.abc import Mapping
from typing import IO, Any

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def stderr_is_journal(stream: IO[Any], environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` is the journal stream systemd connected (``JOURNAL_STREAM`` names
    its device and inode); a stream redirected elsewhere by the service is not."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    dev, _, ino = value.partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # closed, or no file behind it
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


def error_prefix(stream: IO[Any] | None = None) -> str:
    """``<3>`` (error) when ``stream`` (default stderr) is the journal, else nothing: the
    one line a command exits 1 or 2 with is then an error for ``journalctl -p warning``."""
    return "<3>" if stderr_is_journal(sys.stderr if stream is None else stream) else ""


def journal_excepthook(
    kind: type[BaseException], value: BaseException, tb: types.TracebackType | None
) -> None:
    """``sys.excepthook`` under systemd: an uncaught exception's traceback (a bug, exit 1)
    as ``<3>`` error lines, each of which journald takes as an entry of its own."""
    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.write("".join(f"<3>{line}\n" for line in text.splitlines()))


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a logging level: ERROR 3, WARNING 4, INFO 6, DEBUG 7.

    >>> [syslog_priority(n) for n in (50, 40, 30, 20, 10)]
    [2, 3, 4, 6, 7]
    """
    for level, priority in ((50, 2), (40, 3), (30, 4), (20, 6)):
        if levelno >= level:
            return priority
    return 7


class JournalFormatter(logging.Formatter):
    """``<N>LEVEL logger: message``, every line of it (a traceback's too) prefixed, as
    journald takes each line as an entry of its own."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        return prefix + super().format(record).replace("\n", "\n" + prefix)
