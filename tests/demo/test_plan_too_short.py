"""A demo too short for any window to close is refused, naming the shortest that works."""

from __future__ import annotations

import math

import pytest

from dprobe.demo.plan import GRACE_WALL_S, DemoPlan
from dprobe.errors import UsageError


@pytest.mark.parametrize(("duration_s", "speed"), [(5.0, 1.0), (90.0, 1.0), (3.0, 720.0)])
def test_a_run_whose_event_time_closes_no_window_is_a_usage_error(
    duration_s: float, speed: float
) -> None:
    # a window closes once event time passes its end plus the grace (3 wall seconds)
    assert duration_s * speed < 600.0 + GRACE_WALL_S * speed
    with pytest.raises(UsageError, match="no 10-minute window") as err:
        DemoPlan(duration_s=duration_s, speed=speed)
    shortest = math.ceil((600.0 / speed + GRACE_WALL_S) * 10) / 10  # 0.1 s, rounded up
    assert f"--duration {shortest:g}" in str(err.value)
    DemoPlan(duration_s=shortest, speed=speed)  # the one it names is accepted


def test_the_default_run_closes_windows() -> None:
    p = DemoPlan()
    assert p.event_span_s >= p.window_s + p.grace_s
