"""Ctrl-C and SIGTERM around the demo's own phases (the broker's start and stop, the report).

While the run itself goes, :class:`dprobe.demo.run.Demo` handles both signals on its
event loop. Outside it, SIGTERM raises ``KeyboardInterrupt`` as Ctrl-C does, so one
``except KeyboardInterrupt`` stops whatever was started; and the stop itself runs with
both signals ignored (children it starts inherit that), so a second Ctrl-C does not
leave a broker half stopped.

Example:
    >>> with terminate_interrupts():
    ...     with signals_ignored():
    ...         pass  # stop what was started
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

from dprobe.signal_handlers import handled

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def terminate_interrupts() -> Iterator[None]:
    """SIGTERM raises ``KeyboardInterrupt`` inside the block (as it was after it)."""
    with handled((signal.SIGTERM,), _interrupt):
        yield


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM are ignored inside the block (as they were after it)."""
    with handled(_SIGNALS, signal.SIG_IGN):
        yield
