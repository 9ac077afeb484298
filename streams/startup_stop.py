"""A worker asked to stop before faust runs (still waiting for Kafka, or building its app)
stops at once: one line saying so, and exit 0, as a running worker's clean stop.

Until faust installs its own signal handlers, SIGTERM (what systemd and Kubernetes send)
would end the process with no word (status 143) and Ctrl-C would leave through a
``KeyboardInterrupt``. :class:`StartupStop` handles both signals on the event loop
meanwhile: the step in progress (:meth:`StartupStop.run`) is cancelled, and the worker
does not start.

Example (what :mod:`dprobe.streams.runner` does):
    >>> with StartupStop(loop) as stop:  # doctest: +SKIP
    ...     partitions = stop.run(ensure_topics(s), "waiting for Kafka at 127.0.0.1:9092")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Coroutine, Iterator
from types import TracebackType
from typing import Any, TypeVar

from dprobe.signal_handlers import handled

log = logging.getLogger(__name__)

T = TypeVar("T")

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_early: list[signal.Signals] = []  # signals that came while the worker's modules loaded


@contextlib.contextmanager
def noting_stop_signals() -> Iterator[None]:
    """Until :class:`StartupStop` takes over, only note a SIGTERM or SIGINT (loading faust
    and torch takes seconds): the worker stops as soon as it has a loop to stop. The
    handlers before are back afterwards."""

    def noted(signum: int, frame: object) -> None:
        _early.append(signal.Signals(signum))

    try:
        with handled(SIGNALS, noted):
            yield
    finally:
        _early.clear()


class StoppedBeforeStartError(Exception):
    """A stop signal came before the worker ran: a clean stop (exit 0), logged already."""


class StartupStop:
    """Handles SIGTERM and SIGINT on ``loop`` while the worker starts (a context manager;
    the default handlers are back afterwards)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.received: signal.Signals | None = None
        self.noted: signal.Signals | None = None  # one that came after :meth:`hand_over`
        self._step: asyncio.Task[Any] | None = None
        self._handed_over = False

    def __enter__(self) -> StartupStop:
        if _early:
            self.received = _early[0]
        for sig in SIGNALS:
            self.loop.add_signal_handler(sig, self._on_signal, sig)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig in SIGNALS:
            if self._handed_over and exc_type is None:
                self.loop.add_signal_handler(sig, self._note, sig)
            else:
                self.loop.remove_signal_handler(sig)

    def hand_over(self) -> None:
        """The worker starts next: after the block, a stop signal is only noted in
        :attr:`noted` (no default handler ends the process without a word), until faust
        installs its own handlers in their place and is handed the noted one."""
        self._handed_over = True

    def _note(self, sig: signal.Signals) -> None:
        if self.noted is None:
            self.noted = sig

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.received is None:
            self.received = sig
        if self._step is not None:
            self._step.cancel()

    def run(self, step: Coroutine[Any, Any, T], doing: str) -> T:
        """Run ``step`` on the loop; :class:`StoppedBeforeStartError` when a stop signal
        came before or during it (``doing`` says what the worker was doing then)."""
        if self.received is not None:
            step.close()
            self.check(doing)
        task = self.loop.create_task(step)
        self._step = task
        try:
            return self.loop.run_until_complete(task)
        except asyncio.CancelledError:
            if self.received is None:  # not ours: let it go on
                raise
        finally:
            self._step = None
        self.check(doing)
        raise AssertionError("unreachable")  # pragma: no cover

    def check(self, doing: str) -> None:
        """:class:`StoppedBeforeStartError` when a stop signal has come (and log it)."""
        if self.received is None:
            return
        log.info(
            "stopped by %s while %s, before the worker ran: nothing was read or committed",
            self.received.name,
            doing,
        )
        raise StoppedBeforeStartError(f"stopped by {self.received.name} while {doing}")
