"""Python signal handlers for the span of a ``with`` block, the earlier ones back after it.

Example:
    >>> import signal
    >>> with handled((signal.SIGTERM,), signal.SIG_IGN):
    ...     signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    True
    >>> signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    False
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterable, Iterator
from typing import Any


@contextlib.contextmanager
def handled(signals: Iterable[signal.Signals], handler: Any) -> Iterator[None]:
    """``handler`` (a function, ``signal.SIG_IGN`` or ``signal.SIG_DFL``) for each of
    ``signals`` inside the block; after it, the handler each had before (one not set from
    Python, which :func:`signal.signal` returns as ``None``: the default)."""
    before = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, earlier in before.items():
            signal.signal(sig, signal.SIG_DFL if earlier is None else earlier)
