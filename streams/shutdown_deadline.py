"""A worker asked to stop is gone within a deadline, even when Kafka does not answer.

Stopping a faust worker waits on the broker: it commits offsets, leaves its group and
stops the consumer thread, each with its own timeout. With the broker unreachable that
took 93 s and ended in a traceback, longer than Kubernetes waits before it kills a pod
(30 s by default), so the pod died without a word. :class:`ShutdownDeadline` (a mixin of
``mode.Worker``, which ``faust.Worker`` is) arms a timer when the first SIGTERM or SIGINT
arrives: if the worker has not exited ``shutdown_timeout_s`` later, it logs why and
exits with code 1 at once; a second signal does the same without waiting (Ctrl-C twice).
The same signal again within ``SAME_STOP_S`` is the same request delivered twice, not a
second one: ``timeout(1)`` signals the worker and then its process group, which holds it
too, and ``kill -TERM -PGID`` reaches it along with its parent's forwarding.

Exiting without a clean stop loses nothing: a record is acknowledged only after what it
caused was delivered, so every record not acknowledged is read again by the worker that
takes its partition over, planning resumes from its checkpoint and journal in Kafka, and
scaling events sent again carry the same ``event_id``. It costs a rebalance that waits
for the session timeout instead of a prompt leave.

Example (what :mod:`dprobe.streams.runner` runs):
    >>> import faust
    >>> class Worker(ShutdownDeadline, faust.Worker):
    ...     pass
    >>> Worker(app, loop=loop, shutdown_timeout_s=25.0).execute_from_commandline()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from dprobe.errors import reason

log = logging.getLogger(__name__)

EXIT_UNCLEAN = 1  # stopped without a clean shutdown
SAME_STOP_S = 0.2  # the same signal again this soon: one stop request delivered twice


class ShutdownDeadline:
    """Mixin for ``mode.Worker``: exit ``shutdown_timeout_s`` after the first stop signal,
    or at the second, whatever the stop is still waiting for."""

    _signal_stop_time: Any  # set by mode.Worker when the first signal arrives
    _first_stop: tuple[signal.Signals, float] | None = None  # the signal, monotonic time

    def __init__(self, *args: Any, shutdown_timeout_s: float = 25.0, **kwargs: Any) -> None:
        if not 0 < shutdown_timeout_s <= 3600:  # a timer much longer cannot be armed
            raise ValueError("shutdown_timeout_s must be within (0, 3600] seconds")
        self.shutdown_timeout_s = shutdown_timeout_s
        super().__init__(*args, **kwargs)

    def _schedule_shutdown(self, signal: signal.Signals) -> None:
        if self._signal_stop_time:
            first, at = self._first_stop or (None, 0.0)
            if signal == first and time.monotonic() - at < SAME_STOP_S:
                log.debug("%s delivered twice: one stop request", signal.name)
                return
            self._give_up(f"{signal.name} received again while stopping")
            return
        self._first_stop = (signal, time.monotonic())
        super()._schedule_shutdown(signal)  # type: ignore[misc]
        threading.excepthook = _thread_ended
        deadline = threading.Timer(
            self.shutdown_timeout_s,
            self._give_up,
            args=(f"still stopping {self.shutdown_timeout_s:g} s after {signal.name}",),
        )
        deadline.daemon = True  # a worker that stops in time is not held up by it
        deadline.start()

    def _give_up(self, why: str) -> None:
        log.error(
            "%s (a Kafka broker that does not answer, or a batch that closes many windows "
            "still being processed): exiting now without a clean stop; "
            "nothing is lost, the records not yet acknowledged are read again",
            why,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        os._exit(EXIT_UNCLEAN)


def _thread_ended(args: threading.ExceptHookArgs) -> None:
    """While the worker stops, a thread that ends with an error (faust's consumer thread,
    whose requests a broker that is away leaves hanging until they are cancelled) says
    so in one line; the traceback goes to the DEBUG log."""
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "a thread"
    why = reason(args.exc_value) if args.exc_value is not None else args.exc_type.__name__
    log.warning("%s ended while the worker stopped: %s", name, why)
    if args.exc_value is not None:
        log.debug("%s ended with", name, exc_info=args.exc_value)
