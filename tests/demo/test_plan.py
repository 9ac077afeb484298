"""The demo's plan: validation, per-run names, the clock start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dprobe.demo.plan import DemoPlan, clock_start
from dprobe.demo.processes import is_local, parse_bootstrap
from dprobe.demo.scrape import parse_metrics
from dprobe.errors import UsageError


def test_every_run_gets_fresh_names() -> None:
    a, b = DemoPlan(), DemoPlan()
    assert a.topic_prefix != b.topic_prefix and a.app_id != b.app_id
    assert a.topic_prefix.startswith("dprobe.demo-") and a.topic_prefix.endswith(".")


def test_default_run_covers_many_windows() -> None:
    p = DemoPlan()
    assert p.event_span_s >= 12 * 3600
    assert p.windows_per_tenant >= 48


@pytest.mark.parametrize(
    "kwargs",
    [
        {"duration_s": 0},
        {"duration_s": float("nan")},
        {"duration_s": float("inf")},
        {"duration_s": 1e8},  # 2,300 years of event time at the default speed
        {"tenants": 0},
        {"hosts": 0},
        {"speed": 0.5},
        {"speed": 100_000},
    ],
)
def test_bad_settings_are_usage_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        DemoPlan(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("duration_s", [90.0, 3600.0, 43_800.0])
def test_every_accepted_duration_has_a_clock_start_before_now(duration_s: float) -> None:
    # the run starts its collectors only after the worker is up: a plan it accepts must
    # have an event time that starts at 06:00 UTC and ends by now
    now = datetime(2026, 11, 30, 9, tzinfo=UTC)
    p = DemoPlan(duration_s=duration_s)
    start = datetime.fromtimestamp(clock_start(now, p.event_span_s), UTC)
    assert start.hour == 6 and start.timestamp() + p.event_span_s <= now.timestamp()
    assert start >= now - timedelta(days=366 + 7)


@pytest.mark.parametrize("day", range(20, 30))
def test_clock_starts_at_six_on_monday_to_thursday_in_the_past(day: int) -> None:
    now = datetime(2026, 11, day, 3, tzinfo=UTC)
    start = datetime.fromtimestamp(clock_start(now), UTC)
    assert start.weekday() <= 3 and start.hour == 6 and start.minute == 0
    assert (now - start).total_seconds() >= 86_400 - 6 * 3600
    assert (now - start).days <= 4


@pytest.mark.parametrize("day", range(20, 30))
@pytest.mark.parametrize("hours", [18, 40, 60, 240])
def test_a_long_run_starts_early_enough_to_end_by_now(day: int, hours: int) -> None:
    """Event time never passes the wall clock (the worker would dead-letter snapshots
    from the future), however long the run."""
    now = datetime(2026, 11, day, 3, tzinfo=UTC)
    start = datetime.fromtimestamp(clock_start(now, hours * 3600.0), UTC)
    assert start.weekday() <= 3 and start.hour == 6
    assert start + timedelta(hours=hours) <= now
    assert now - (start + timedelta(hours=hours)) < timedelta(days=5)  # not needlessly old


def test_bootstrap_parsing() -> None:
    assert parse_bootstrap("localhost:9092") == ("localhost", 9092)
    assert parse_bootstrap("[::1]:19092,b:1") == ("::1", 19092)
    assert is_local("127.0.0.1") and not is_local("kafka-1")
    with pytest.raises(UsageError):
        parse_bootstrap("kafka-1")


def test_scrape_ignores_other_series_and_pairs_quantiles() -> None:
    text = (
        "# TYPE dprobe_tenant_forecast_gpus gauge\n"
        'dprobe_tenant_forecast_gpus{tenant="vc-a",horizon="600",quantile="0.5"} 3.0\n'
        'dprobe_tenant_forecast_gpus{tenant="vc-a",horizon="600",quantile="0.9"} 4.0\n'
        'dprobe_tenant_forecast_gpus{tenant="vc-b",horizon="600",quantile="0.5"} 1.0\n'
        'dprobe_tenant_demand_gpus{tenant="vc-a"} 9.0\n'
        "dprobe_windows_emitted_total 12.0\n"
    )
    s = parse_metrics(text)
    assert s.forecasts == {("vc-a", 600.0): (3.0, 4.0), ("vc-b", 600.0): (1.0, 1.0)}
    assert s.quotas == {}
