"""Keep a Kafka client that retries from flooding the log with the same line.

While a broker is away, aiokafka logs the same error on every reconnect attempt (tens of
lines a second: ``Unable connect to node with id 1 ...``), and the lag poller each failed
refresh. :class:`RepeatedLines` lets each distinct warning or error of theirs through once
per ``window_s``; the
repeats in between are counted, and the next line let through says how many there were.
Other loggers and lines below WARNING pass untouched.

Example:
    >>> import logging
    >>> handler = logging.StreamHandler()
    >>> handler.addFilter(RepeatedLines(window_s=60.0))
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# the Kafka client, and the lag poller, which says each refresh that fails (every 5 s)
KAFKA_CLIENT_LOGGERS = ("aiokafka", "dprobe.sinks.consumer_lag")
MAX_KEPT = 1000  # distinct lines remembered; the oldest is forgotten first


@dataclass
class _Seen:
    since: float  # when it was last let through (the clock's time)
    wall: float  # the same, as wall-clock time, to say it
    left_out: int = 0  # repeats filtered out since


class RepeatedLines(logging.Filter):
    """A handler filter: a Kafka client's warning or error, once per ``window_s`` for each
    distinct text and exception; the next one let through after repeats ends with ``(N
    more like it since HH:MM:SS)``, the time the one before it was let through.

    >>> f = RepeatedLines(window_s=60.0, clock=iter([0.0, 1.0, 2.0, 61.0]).__next__)
    >>> line = lambda: logging.LogRecord("aiokafka", logging.ERROR, "", 0, "down", None, None)
    >>> [f.filter(line()) for _ in range(3)]
    [True, False, False]
    >>> record = line(); f.filter(record), record.getMessage()[:25]
    (True, 'down (2 more like it sinc')
    """

    def __init__(
        self,
        window_s: float = 60.0,
        *,
        loggers: tuple[str, ...] = KAFKA_CLIENT_LOGGERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.window_s = window_s
        self.loggers = loggers
        self._clock = clock
        self._seen: dict[tuple[str, int, str, str], _Seen] = {}
        self._lock = threading.Lock()  # a handler may be called from several threads

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not self._watched(record.name):
            return True
        text = record.getMessage()
        error = record.exc_info[1] if record.exc_info else None
        key = (record.name, record.levelno, text, "" if error is None else repr(error))
        with self._lock:
            now = self._clock()
            seen = self._seen.get(key)
            if seen is not None and now - seen.since < self.window_s:
                seen.left_out += 1
                return False
            if seen is not None and seen.left_out:
                since = time.strftime("%H:%M:%S", time.localtime(seen.wall))
                record.msg = f"{text} ({seen.left_out} more like it since {since})"
                record.args = None
            self._seen.pop(key, None)
            self._seen[key] = _Seen(since=now, wall=time.time())
            if len(self._seen) > MAX_KEPT:
                del self._seen[next(iter(self._seen))]
        return True

    def _watched(self, name: str) -> bool:
        return any(name == n or name.startswith(n + ".") for n in self.loggers)
