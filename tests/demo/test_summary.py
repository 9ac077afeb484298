"""The demo's summary: forecast error pairing, counts, the printed lines."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from dprobe.demo.record import Recording, Scrape
from dprobe.demo.summary import HorizonError, forecast_errors, format_summary, summarize
from dprobe.schema import Forecast, ModelInfo, ScalingEvent


def window(tenant: str, end: float, running: float, pending: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(
        tenant=tenant,
        window_start=end - 600.0,
        window_end=end,
        running_gpus=running,
        pending_gpus=pending,
        quota_gpus=None,
        lost_snapshots=0,
    )


def event(
    tenant: str, end: float, target: float, eid: str, plan: str = "p1", version: str = "1"
) -> ScalingEvent:
    return ScalingEvent(
        event_id=eid,
        plan_id=plan,
        ts=end + 5.0,
        time="",
        tenant=tenant,
        action="scale_up" if target > 8 else "scale_down",
        current_quota_gpus=8.0,
        target_quota_gpus=target,
        delta_gpus=target - 8.0,
        forecast=Forecast(horizon_s=600.0, p50=target - 1, p90=target),
        reason="forecast_above_quota",
        message="",
        model=ModelInfo(name="dprobe-mmoe", version=version),
        window_end=end,
    )


def test_forecast_error_pairs_forecast_at_t_with_demand_at_t_plus_h() -> None:
    rec = Recording()
    for end, gpus in ((600.0, 4.0), (1200.0, 6.0), (1800.0, 8.0)):
        rec.add_window(window("vc-a", end, gpus))
    rec.forecasts["vc-a"] = {600.0: {600.0: (5.0, 7.0), 1200.0: (9.0, 9.5), 1800.0: (1.0, 2.0)}}
    (err,) = forecast_errors(rec)
    # 600 -> actual 6 (|5-6| = 1, last value |4-6| = 2), 1200 -> actual 8 (1, 2); 1800 unscored
    assert err == HorizonError(
        horizon_s=600.0, pairs=2, mae=1.0, last_value_mae=2.0, p90_coverage=1.0
    )
    assert err.ratio == 0.5


def test_demand_is_running_plus_pending() -> None:
    rec = Recording()
    rec.add_window(window("vc-a", 600.0, 3.0, pending=2.0))
    assert rec.demand == {"vc-a": {600.0: 5.0}}


def test_no_baseline_error_gives_nan_ratio() -> None:
    assert math.isnan(HorizonError(600.0, 1, 0.5, 0.0, 1.0).ratio)


def test_events_are_deduplicated_and_counted() -> None:
    rec = Recording()
    rec.add_window(window("vc-a", 600.0, 4.0))
    assert rec.add_event(event("vc-a", 600.0, 16.0, "e1"))
    assert not rec.add_event(event("vc-a", 600.0, 16.0, "e1"))
    assert rec.add_event(event("vc-b", 600.0, 0.0, "e2"))
    s = summarize(rec, snapshots=12)
    assert (s.events, s.scale_up, s.scale_down, s.plans, s.duplicates) == (2, 1, 1, 1, 1)
    assert rec.forecasts["vc-a"][600.0] == {600.0: (15.0, 16.0)}


def test_scrapes_are_filed_under_the_newest_window_of_the_tenant() -> None:
    rec = Recording()
    rec.add_scrape(Scrape(forecasts={("vc-a", 3600.0): (1.0, 2.0)}))  # no window yet: dropped
    rec.add_window(window("vc-a", 600.0, 4.0))
    rec.add_window(window("vc-a", 1200.0, 4.0))
    rec.add_scrape(Scrape(forecasts={("vc-a", 3600.0): (5.0, 6.0)}, quotas={"vc-a": 8.0}))
    assert rec.forecasts == {"vc-a": {3600.0: {1200.0: (5.0, 6.0)}}}
    assert rec.scraped_quota == {"vc-a": 8.0}


def test_summary_lines() -> None:
    rec = Recording()
    for end, gpus in ((600.0, 4.0), (1200.0, 6.0)):
        rec.add_window(window("vc-a", end, gpus))
    rec.forecasts["vc-a"] = {600.0: {600.0: (5.0, 7.0)}}
    rec.add_lag(1.0, 40.0)
    rec.add_lag(2.0, 0.0)
    lines = format_summary(summarize(rec, snapshots=30))
    assert all(line.startswith("summary: ") for line in lines)
    text = "\n".join(lines)
    assert "windows: 2 TenantWindows from 1 tenant ending" in text
    assert "30 snapshots taken, 0 lost" in text
    assert "forecasts: 1 recorded (horizons 10m)" in text
    assert "events: 0 scaling events (0 scale_up, 0 scale_down) in 0 plans; 0 duplicates" in text
    assert "consumer lag: peak 40 records, 0 at the end" in text
    one = Recording()
    one.add_window(window("vc-a", 600.0, 1.0))
    one.add_lag(1.0, 1.0)
    one_text = "\n".join(format_summary(summarize(one, snapshots=1)))
    assert "1 snapshot taken" in one_text and "consumer lag: peak 1 record," in one_text
    assert "forecast error 10m: MAE 1.00 GPUs over 1 forecast vs last value 2.00 = 0.50 x" in text


def test_dead_letters_come_from_the_latest_scrape_by_reason() -> None:
    rec = Recording()
    rec.add_scrape(Scrape(dead_letters={"clock_skew": 2, "bad_value": 0}))
    rec.add_scrape(Scrape())  # a scrape without the counter keeps what was seen
    rec.add_scrape(Scrape(dead_letters={"clock_skew": 5, "bad_value": 1, "decode_error": 0}))
    text = "\n".join(format_summary(summarize(rec)))
    assert "summary: dead letters: 6 records (bad_value 1, clock_skew 5)" in text
    clean = Recording()
    clean.add_scrape(Scrape(dead_letters={"clock_skew": 0}))
    assert "summary: dead letters: 0 records" in format_summary(summarize(clean))


def test_empty_run_says_so() -> None:
    text = "\n".join(format_summary(summarize(Recording())))
    assert "windows: 0 TenantWindows" in text
    assert "forecasts: 0 recorded" in text
    assert "summary: events: 0 scaling events " in text
    assert "consumer lag: not measured" in text
    assert "dead letters: not measured" in text
    assert "forecast error: no forecast could be scored yet" in text


@pytest.mark.parametrize(("horizon", "label"), [(600.0, "10m"), (3600.0, "1h"), (45.0, "45s")])
def test_horizon_labels(horizon: float, label: str) -> None:
    rec = Recording()
    rec.add_window(window("vc-a", 600.0, 1.0))
    rec.forecasts["vc-a"] = {horizon: {600.0: (1.0, 1.0)}}
    assert f"(horizons {label})" in "\n".join(format_summary(summarize(rec)))


@pytest.mark.parametrize(
    ("version", "words"), [("3+cal1", "calibrated p90 covers"), ("3", "; p90 covers")]
)
def test_the_coverage_line_says_whether_the_p90_was_calibrated(version: str, words: str) -> None:
    rec = Recording()
    for end, gpus in ((600.0, 4.0), (1200.0, 6.0)):
        rec.add_window(window("vc-a", end, gpus))
    rec.add_event(event("vc-a", 600.0, 7.0, "e1", version=version))  # p50 6, p90 7
    s = summarize(rec)
    assert s.p90_calibrated is ("+cal" in version)
    line = next(x for x in format_summary(s) if "forecast error 10m" in x)
    assert line.endswith(f"{words} 100 %")


def test_a_horizon_off_the_window_grid_is_scored_against_the_window_that_ends_after_it() -> None:
    """A plan lead of 630.5 s (move_latency_s 30.5) is no whole number of 60-s windows: as
    the worker does, its forecasts are scored against the first window that ends at or
    after T + h (here T + 660 s), not left out as never scored."""
    ends = [600.0 + 60.0 * k for k in range(30)]
    demand = {"vc-a": {t: float(k % 7) for k, t in enumerate(ends)}}
    made = dict.fromkeys(ends, (3.0, 5.0))
    rec = Recording(demand=demand, forecasts={"vc-a": {630.5: made}})
    (err,) = forecast_errors(rec)
    # the reference, in plain Python: the first window end at or after each target
    rows = []
    for at in ends:
        later = [t for t in ends if t >= at + 630.5]
        if later:
            rows.append((demand["vc-a"][later[0]], demand["vc-a"][at]))
    assert err.horizon_s == 630.5 and err.pairs == len(rows) == 19
    assert err.mae == pytest.approx(sum(abs(3.0 - a) for a, _ in rows) / len(rows))
    assert err.last_value_mae == pytest.approx(sum(abs(n - a) for a, n in rows) / len(rows))
    assert err.p90_coverage == pytest.approx(sum(a <= 5.0 for a, _ in rows) / len(rows))
