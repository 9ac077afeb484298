"""Folders and files a command writes to, checked before it starts, so a path that cannot
be used is one clear error (exit 2) at start instead of a failure minutes later: a
folder is made with its parents and written to once (:func:`check_writable`); a file or
folder written only at the end is checked without making anything (:func:`output_file`,
:func:`output_folder`).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> check_writable(Path(tempfile.mkdtemp()) / "a" / "b", "the state folder")
"""

from __future__ import annotations

import contextlib
import os
import stat
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


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` (a file or folder made or renamed in it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(folder: Path, *, fsync: bool = True) -> None:
    """Create ``folder`` and its missing parents, fsyncing (with ``fsync``) each new one into
    its parent, so that after a power loss a file made in them is not lost with them.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> make_dirs(root / "a" / "b"); (root / "a" / "b").is_dir()
    True
    """
    missing = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        if fsync:
            fsync_dir(new.parent)


def _existing_folder(path: Path, flag: str, shown: str | Path) -> Path:
    """The nearest folder of ``path``'s parents that exists (where the missing ones would
    be made), checked to be a writable folder."""
    folder = path.absolute().parent
    while True:
        try:
            st = folder.stat()
        except (FileNotFoundError, NotADirectoryError):  # made on writing; or a file above
            folder = folder.parent
            continue
        except OSError as exc:
            raise UsageError(f"{flag} {shown}: {folder}: {exc.strerror or exc}") from None
        break
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{flag} {shown}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {shown}: {folder} is not writable")
    return folder


def output_file(path: str | Path, flag: str, shown: str | Path | None = None) -> Path:
    """``path`` checked, before any work, as a file a command writes at its end: not a
    directory, its folder (or the nearest one that exists, the rest made on writing) a
    writable directory, and the file itself writable if it is there; a
    :class:`UsageError` naming ``flag`` and ``shown`` (default ``path``) otherwise.
    Nothing is created.

    >>> output_file("/", "--chart")
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: --chart /: is a directory, not a file
    """
    out = Path(path)
    shown = path if shown is None else shown
    try:
        is_dir, exists = out.is_dir(), out.exists()
    except OSError as exc:
        raise UsageError(f"{flag} {shown}: {exc.strerror or exc}") from None
    if is_dir:
        raise UsageError(f"{flag} {shown}: is a directory, not a file")
    _existing_folder(out, flag, shown)
    if exists and not os.access(out, os.W_OK):
        raise UsageError(f"{flag} {shown}: is not writable")
    return out


def output_folder(path: str | Path, flag: str) -> Path:
    """``path`` checked, before any work, as a folder a command writes files in: a writable
    directory, or a path whose nearest existing parent is one (made on writing); a
    :class:`UsageError` naming ``flag`` and ``path`` otherwise. Nothing is created."""
    out = Path(path)
    try:
        is_dir, exists = out.is_dir(), out.exists()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None
    if exists and not is_dir:
        raise UsageError(f"{flag} {path}: exists and is not a directory")
    if not is_dir:
        _existing_folder(out, flag, path)
    elif not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: is not writable")
    return out
