"""Clocks the collector and the synthetic backend run on: real, accelerated or manual.

A clock gives the current time in epoch seconds and sleeps in *its own* seconds, so a
demo or a test can run a day of telemetry in minutes.

Example:
    >>> clock = ManualClock(start=1_700_000_000.0)
    >>> clock.advance(2.5); clock.now()
    1700000002.5
    >>> fast = AcceleratedClock(speed=60.0, start=0.0)  # one wall second = one minute
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Current time (epoch seconds) and a sleep measured in the clock's own seconds."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Wall-clock time (``time.time``) and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class AcceleratedClock:
    """Time that runs ``speed`` times faster than the wall clock, from ``start``.

    ``AcceleratedClock(speed=3600)`` turns an hour into a second; ``start`` defaults to
    the wall time at construction.
    """

    def __init__(self, speed: float, start: float | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.speed = speed
        self._start = time.time() if start is None else start
        self._t0 = time.monotonic()

    def now(self) -> float:
        return self._start + (time.monotonic() - self._t0) * self.speed

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.speed)


class ManualClock:
    """A clock that moves only when told: ``advance()``, or ``sleep()`` (which advances).

    ``sleep`` yields to the event loop once, so loops driven by it stay cooperative.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    async def sleep(self, seconds: float) -> None:
        self._now += max(0.0, seconds)
        await asyncio.sleep(0)
