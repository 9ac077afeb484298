"""Settings of one demo run and what derives from them (topic prefix, app id, clock start).

Every run gets a fresh topic prefix and app id, so a rerun never reads an older run's data.
Event time runs ``speed`` times faster than the wall clock and starts at 06:00 UTC of a
recent weekday, so a default run covers the morning peak of one tenant, the afternoon
peak of the next and the evening peak of the third: demand visibly moves between tenants.

Example:
    >>> p = DemoPlan(duration_s=90, speed=720, window_s=600)
    >>> p.event_span_s / 3600, p.windows_per_tenant
    (18.0, 108)
    >>> p.grace_s  # three wall seconds of lateness, in event time
    2160.0
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from dprobe.errors import UsageError

DEFAULT_DURATION_S = 90.0
DEFAULT_SPEED = 720.0  # one wall second = 12 minutes: 90 s cover 18 hours
DEFAULT_WINDOW_S = 600.0  # 10-minute windows in event time
DEFAULT_INTERVAL_S = 120.0  # one snapshot per host every two event-time minutes
GRACE_WALL_S = 3.0  # lateness allowed across hosts, in wall seconds
MEAN_JOB_S = 5400.0  # shorter jobs than the backend's default, so demand follows the rhythm
START_HOUR_UTC = 6
MAX_EVENT_SPAN_S = 365 * 86_400.0  # event time starts that much before now at most


def _run_tag() -> str:
    return datetime.now(UTC).strftime("%Y%m%d%H%M%S") + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class DemoPlan:
    """What one ``dprobe demo`` run does; validated on construction (``UsageError``)."""

    duration_s: float = DEFAULT_DURATION_S
    tenants: int = 4
    hosts: int = 8
    gpus_per_host: int = 4  # the planner moves quota in whole hosts: 4-GPU steps
    speed: float = DEFAULT_SPEED
    window_s: float = DEFAULT_WINDOW_S
    interval_s: float = DEFAULT_INTERVAL_S
    tag: str = field(default_factory=_run_tag)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise UsageError("--duration must be a finite number > 0")
        if not 1 <= self.tenants <= 26:
            raise UsageError("--tenants must be between 1 and 26")
        if not 1 <= self.hosts <= 64:
            raise UsageError("--hosts must be between 1 and 64")
        if not self.speed >= 1:
            raise UsageError("--speed must be >= 1")
        if self.window_s / self.speed < 0.05:
            raise UsageError(
                f"--speed {self.speed:g} closes a {self.window_s:g} s window every "
                f"{1000 * self.window_s / self.speed:.0f} ms of wall time: too fast"
            )
        if self.event_span_s < self.window_s + self.grace_s:
            shortest = math.ceil((self.window_s / self.speed + GRACE_WALL_S) * 10) / 10
            raise UsageError(
                f"--duration {self.duration_s:g} at --speed {self.speed:g} covers "
                f"{self.event_span_s:g} s of event time: no {self.window_s / 60:g}-minute window "
                f"would close (one closes {GRACE_WALL_S:g} wall seconds after its end); "
                f"--duration {shortest:g} at least at this speed"
            )
        if self.event_span_s > MAX_EVENT_SPAN_S:
            raise UsageError(
                f"--duration {self.duration_s:g} at --speed {self.speed:g} covers "
                f"{self.event_span_s / 86_400:,.0f} days of event time, which must end by now: "
                f"at most {MAX_EVENT_SPAN_S / 86_400:.0f} days (a shorter --duration or a "
                "lower --speed)"
            )

    @property
    def topic_prefix(self) -> str:
        """Per-run topic prefix: ``dprobe.demo-<tag>.`` (so ``...samples``, ``...features``)."""
        return f"dprobe.demo-{self.tag}."

    @property
    def app_id(self) -> str:
        """Per-run worker app id (its consumer group)."""
        return f"dprobe-demo-{self.tag}"

    @property
    def grace_s(self) -> float:
        """Window lateness in event time: ``GRACE_WALL_S`` wall seconds."""
        return GRACE_WALL_S * self.speed

    @property
    def event_span_s(self) -> float:
        """Event time the collectors cover."""
        return self.duration_s * self.speed

    @property
    def windows_per_tenant(self) -> int:
        return int(self.event_span_s // self.window_s)


def clock_start(now: datetime, span_s: float = 0.0) -> float:
    """Epoch seconds of 06:00 UTC on the latest Monday-Thursday at least a day before
    ``now`` from which ``span_s`` seconds of event time end by ``now``.

    The synthetic workload is quieter at weekends; starting on Monday to Thursday keeps a
    run of up to a day on working days. A longer run starts earlier: the worker takes a
    snapshot stamped after the time it is sent as a host with a wrong clock and
    dead-letters it (``max_clock_skew_s``), so event time must never pass the wall clock.

    >>> datetime.fromtimestamp(clock_start(datetime(2026, 11, 30, 9, tzinfo=UTC)), UTC)
    datetime.datetime(2026, 11, 26, 6, 0, tzinfo=datetime.timezone.utc)
    >>> datetime.fromtimestamp(clock_start(datetime(2026, 11, 30, 9, tzinfo=UTC), 5 * 86400), UTC)
    datetime.datetime(2026, 11, 25, 6, 0, tzinfo=datetime.timezone.utc)
    """
    day = (now.astimezone(UTC) - timedelta(days=1)).date()
    while True:
        start = datetime(day.year, day.month, day.day, START_HOUR_UTC, tzinfo=UTC)
        if day.weekday() <= 3 and start.timestamp() + span_s <= now.timestamp():
            return start.timestamp()
        day -= timedelta(days=1)
