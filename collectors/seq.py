"""The per-host snapshot counter ``seq``: never repeats, survives restarts.

The next value is written to a small state file (atomically, optionally fsynced) every
time one is handed out. On start the counter resumes from the larger of the file and
``floor`` (the spool's last seq + 1), so losing either one alone cannot repeat a seq.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "seq-h1"
    >>> c = SeqCounter(path); c.load(); c.next(), c.next()
    (0, 1)
    >>> again = SeqCounter(path); again.load(); again.next()
    2
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class SeqCounter:
    """Hands out 0, 1, 2, ... for one host and persists the next value in ``path``."""

    def __init__(self, path: Path | str, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._next: int | None = None

    def load(self, floor: int = 0) -> None:
        """Resume from the state file, never below ``floor``, and write it back: a folder
        it cannot be written in raises ``OSError`` here, at start, not at the first tick."""
        stored = 0
        try:
            stored = int(self.path.read_text().strip() or 0)
        except FileNotFoundError:
            pass
        except ValueError:
            log.error("seq state %s unreadable: resuming from %d", self.path, floor)  # noqa: TRY400
        self._next = max(stored, floor, 0)
        self._save(self._next)

    def peek(self) -> int:
        """The value the next call to :meth:`next` returns."""
        if self._next is None:
            raise RuntimeError("SeqCounter.load() was not called")
        return self._next

    def next(self) -> int:
        """Hand out the next seq; it is persisted before it is returned. Where it cannot be
        persisted (a full disk) the error is raised and the seq is used up all the same, so
        the snapshot that needed it leaves a gap downstream (a restart resumes from the
        spool's last seq + 1 at least, so the unsaved value is never handed out twice)."""
        value = self.peek()
        self._next = value + 1
        self._save(value + 1)
        return value

    def _save(self, value: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w") as f:
            f.write(f"{value}\n")
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
