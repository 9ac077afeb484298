"""The planning lead (one move latency plus one window, or the horizon) is a horizon every
scaling event carries: a worker setting that makes it longer than an event holds is named."""

from __future__ import annotations

import pytest

from dprobe.config import ConfigError, WorkerSettings
from dprobe.schema import MAX_SPAN_S


def test_a_move_latency_that_puts_the_lead_beyond_what_an_event_holds_is_named() -> None:
    # each setting alone is within its limit; their sum planned nothing (every plan refused)
    with pytest.raises(ConfigError, match="move_latency_s"):
        WorkerSettings(move_latency_s=MAX_SPAN_S, window_s=60.0)


def test_the_longest_lead_an_event_holds_is_taken() -> None:
    s = WorkerSettings(move_latency_s=MAX_SPAN_S - 60.0, window_s=60.0)
    assert s.plan_lead_s == MAX_SPAN_S
