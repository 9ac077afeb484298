"""Checkpoint files of learned state: written atomically, read as data, never as code.

A state is what a model's ``state_dict()`` returns: plain containers, numbers, strings and
tensors. It is written in torch's format and read with ``torch.load(weights_only=True)``,
which rebuilds only such values: a file that names any other Python object is refused
instead of run. A file that cannot be read as a state (corrupt, cut short, foreign) is a
:class:`CheckpointError` naming the file, in one line.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "state.ckpt"
    >>> save_state({"quotas": {"vc-a": 16}, "seen": [1.5, 2.0]}, path)
    >>> load_state(path)
    {'quotas': {'vc-a': 16}, 'seen': [1.5, 2.0]}
    >>> _ = path.write_bytes(b"not a checkpoint")
    >>> load_state(path)
    Traceback (most recent call last):
    ...
    dprobe.models.checkpoint.CheckpointError: ...state.ckpt: not a checkpoint (not torch's format)
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

from dprobe.errors import UsageError


class CheckpointError(UsageError):
    """A checkpoint cannot be read as a state, or does not fit the model's settings."""


def save_state(state: Any, path: str | Path) -> None:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, rename)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tmp.open("wb") as f:
        f.write(state_bytes(state))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def load_state(path: str | Path) -> Any:
    """The state written to ``path`` by :func:`save_state`, read as data only.

    ``CheckpointError`` if the file is not such a state; ``OSError`` if it cannot be read.
    """
    return state_of(Path(path).read_bytes(), str(path))


def state_bytes(state: Any) -> bytes:
    """``state`` in the checkpoint format, as bytes (to store elsewhere than a file)."""
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def state_of(raw: bytes, name: str) -> Any:
    """The state in ``raw`` (from :func:`state_bytes`), read as data only;
    ``CheckpointError`` naming ``name`` if it is not such a state.

    >>> state_of(state_bytes({"a": [1, 2]}), "x")
    {'a': [1, 2]}
    """
    import torch

    try:
        return torch.load(io.BytesIO(raw), weights_only=True)
    except pickle.UnpicklingError as exc:
        why = (
            "it names Python objects other than plain data and tensors, and is not run"
            if "Unsupported global" in str(exc)
            else "not torch's format"
        )
        raise CheckpointError(f"{name}: not a checkpoint ({why})") from exc
    except Exception as exc:
        raise CheckpointError(f"{name}: not a checkpoint (corrupt or cut short)") from exc


def first_line(exc: BaseException) -> str:
    """The first line of an error's message, or its type when it has none; a first line
    that only announces what follows (ends with a colon, as torch's "Error(s) in loading
    state_dict for MMoENet:") gets the first line after it.

    >>> first_line(RuntimeError("Error(s) in loading:\\n\\tsize mismatch for w.\\n\\tmore"))
    'Error(s) in loading: size mismatch for w.'
    """
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]
