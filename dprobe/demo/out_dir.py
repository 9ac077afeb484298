"""The demo's ``--out`` folder, made (or checked) before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

from dprobe.errors import UsageError


def prepare_out_dir(path: Path) -> Path:
    """Create ``path`` (and its parents) as a writable folder, or raise ``UsageError``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     prepare_out_dir(Path(tmp) / "a" / "b").is_dir()
    True
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"--out {path}: not a folder") from None
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot create the folder ({exc.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--out {path}: the folder is not writable")
    return path
