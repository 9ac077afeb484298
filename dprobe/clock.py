"""Clocks every service runs on: real, accelerated or manual, injected through constructors.

A clock gives the wall time in epoch seconds (``now``), a monotonic time for measuring
intervals (``monotonic``; it never steps back when the wall clock does), and a sleep
measured in *its own* seconds, so a demo or a test can run a day of telemetry in minutes
and a test of pacing runs without sleeping. The collector, the synthetic backend, a
replay and the archive all take a :class:`Clock`.

Example:
    >>> clock = ManualClock(start=1_700_000_000.0)
    >>> clock.advance(2.5); clock.now(), clock.monotonic()
    (1700000002.5, 2.5)
    >>> import asyncio; asyncio.run(clock.sleep(1.0)); clock.slept
    [1.0]
    >>> fast = AcceleratedClock(speed=60.0, start=0.0)  # one wall second = one minute
    >>> isinstance(fast, Clock) and isinstance(SystemClock(), Clock)
    True
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Wall time (epoch seconds), monotonic time, and a sleep in the clock's own seconds."""

    def now(self) -> float: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock: ``time.time``, ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class AcceleratedClock:
    """Time that runs ``speed`` times faster than the wall clock, from ``start``.

    ``AcceleratedClock(speed=3600)`` turns an hour into a second; ``start`` defaults to
    the wall time at construction. ``monotonic`` counts the clock's own seconds since
    construction.
    """

    def __init__(self, speed: float, start: float | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.speed = speed
        self._start = time.time() if start is None else start
        self._t0 = time.monotonic()

    def now(self) -> float:
        return self._start + self.monotonic()

    def monotonic(self) -> float:
        return (time.monotonic() - self._t0) * self.speed

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.speed)


class ManualClock:
    """A clock that moves only when told: ``advance()``, or ``sleep()`` (which advances).

    ``start`` is the wall time and ``monotonic_start`` the monotonic time at construction;
    both move together. ``sleep`` records what was asked in ``slept`` and yields to the
    event loop once, so loops driven by it stay cooperative.
    """

    def __init__(self, start: float = 1_700_000_000.0, *, monotonic_start: float = 0.0) -> None:
        self._now = start
        self._monotonic = monotonic_start
        self.slept: list[float] = []

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move the wall time by ``seconds`` (negative: a step back, as NTP may do); the
        monotonic time only moves forward."""
        self._now += seconds
        self._monotonic += max(0.0, seconds)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)
