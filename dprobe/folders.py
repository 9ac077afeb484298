"""Folders a command writes to, checked before it starts: made with their parents, and
written to once, so a folder that cannot be used is one clear error (exit 2) at start
instead of a failure minutes later.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> check_writable(Path(tempfile.mkdtemp()) / "a" / "b", "the state folder")
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from dprobe.errors import UsageError


def check_writable(
    folder: Path,
    what: str,
    *,
    make: Callable[[Path], None] | None = None,
    fsync: bool = False,
) -> None:
    """Create ``folder`` with its parents (``make``, else ``mkdir``) and write and remove a
    probe file in it (fsynced with ``fsync``); :class:`~dprobe.errors.UsageError`
    ``"WHAT FOLDER is not writable: reason"`` when either fails."""
    probe = folder / f".dprobe-write-probe-{os.getpid()}"
    blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:  # mkdir would say only "File exists" or "Not a directory"
        raise UsageError(f"{what} {folder} is not writable: {blocker} is a file, not a folder")
    try:
        if make is not None:
            make(folder)
        else:
            folder.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as fh:
            fh.write(b"dprobe")
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        probe.unlink()
    except OSError as exc:
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
        raise UsageError(f"{what} {folder} is not writable: {exc.strerror or exc}") from None
