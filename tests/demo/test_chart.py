"""The demo's chart: series assembly (pure) and the PNG itself."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from dprobe.demo.chart import chart_horizon, chart_series, render
from dprobe.demo.record import Recording


def recording() -> Recording:
    rec = Recording()
    for tenant in ("vc-b", "vc-a"):
        for k in range(1, 7):
            rec.add_window(
                SimpleNamespace(
                    tenant=tenant,
                    window_end=600.0 * k,
                    running_gpus=float(k),
                    pending_gpus=0.0,
                    quota_gpus=None,
                    lost_snapshots=0,
                )
            )
    rec.forecasts["vc-a"] = {
        3600.0: {600.0: (2.0, 3.0)},
        600.0: {1200.0: (2.5, 3.5), 600.0: (1.5, 2.0)},
    }
    rec.scraped_quota.update({"vc-a": 8.0, "vc-b": 4.0})
    rec.events.append(SimpleNamespace(tenant="vc-a", window_end=1200.0, ts=1205.0,
                                      current_quota_gpus=4.0, target_quota_gpus=8.0))  # fmt: skip
    return rec


def test_shortest_horizon_is_drawn() -> None:
    assert chart_horizon(recording()) == 600.0
    assert chart_horizon(Recording()) is None


def test_series_per_tenant_sorted_with_forecasts_at_their_target_time() -> None:
    a, b = chart_series(recording(), 600.0)
    assert (a.tenant, b.tenant) == ("vc-a", "vc-b")
    assert a.demand[:2] == [(600.0, 1.0), (1200.0, 2.0)]
    assert a.forecast == [(1200.0, 1.5, 2.0), (1800.0, 2.5, 3.5)]
    # quota from the event (before and after it), held to the last window
    assert a.quota == [(600.0, 4.0), (1200.0, 8.0), (3600.0, 8.0)]
    assert a.events == [(1200.0, 8.0)]
    # no event: the quota the worker reports, over the tenant's windows
    assert b.quota == [(600.0, 4.0), (3600.0, 4.0)]
    assert b.forecast == [] and b.events == []


def test_no_quota_known_draws_none() -> None:
    rec = recording()
    rec.scraped_quota.clear()
    assert chart_series(rec, 600.0)[1].quota == []


def test_render_writes_a_png(tmp_path: Path) -> None:
    rec = recording()
    path = render(chart_series(rec, 600.0), tmp_path / "sub" / "demo.png", horizon_s=600.0)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_render_without_any_data_still_writes_a_png(tmp_path: Path) -> None:
    path = render([], tmp_path / "empty.png", horizon_s=None)
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_the_band_is_marked_calibrated_when_the_events_say_so() -> None:
    rec = recording()
    assert not chart_series(rec, 600.0)[0].calibrated  # events without a model: unknown
    rec.events.append(SimpleNamespace(tenant="vc-b", window_end=1800.0, ts=1805.0,
                                      current_quota_gpus=4.0, target_quota_gpus=4.0,
                                      model=SimpleNamespace(name="dprobe-mmoe",
                                                            version="3+cal1")))  # fmt: skip
    assert all(s.calibrated for s in chart_series(rec, 600.0))


def test_demand_is_zero_at_the_window_ends_a_tenant_sent_no_window_for() -> None:
    # a tenant that runs nothing sends no window: its demand there is 0, not the last
    # window's held across the gap (which reads as demand its quota ignored)
    rec = Recording()
    sent = {"vc-a": [1, 2, 3, 4, 5, 6], "vc-b": [2, 3, 6], "vc-c": [3, 4]}
    for tenant, ks in sent.items():
        for k in ks:
            rec.add_window(SimpleNamespace(tenant=tenant, window_end=600.0 * k,
                                           running_gpus=1.5, pending_gpus=0.5))  # fmt: skip
    a, b, c = chart_series(rec, None)
    ends = [600.0 * k for k in range(1, 7)]
    assert a.demand == [(end, 2.0) for end in ends]
    # from the tenant's first window on: 0 where it sent none
    assert b.demand == [(end, 2.0 if end / 600 in sent["vc-b"] else 0.0) for end in ends[1:]]
    assert c.demand == [(1800.0, 2.0), (2400.0, 2.0), (3000.0, 0.0), (3600.0, 0.0)]


def test_the_quota_is_drawn_as_far_as_the_demand_of_a_tenant_that_went_quiet() -> None:
    rec = Recording()
    for tenant, last in (("vc-a", 6), ("vc-b", 3)):
        for k in range(1, last + 1):
            rec.add_window(SimpleNamespace(tenant=tenant, window_end=600.0 * k,
                                           running_gpus=2.0, pending_gpus=0.0))  # fmt: skip
    rec.scraped_quota.update({"vc-a": 8.0, "vc-b": 4.0})
    rec.events.append(SimpleNamespace(tenant="vc-b", window_end=1200.0, ts=1200.0,
                                      current_quota_gpus=4.0, target_quota_gpus=8.0))  # fmt: skip
    _, b = chart_series(rec, None)
    # quiet from 2400 on: demand 0 to the run's last window end, the quota it holds too
    assert b.demand[-1] == (3600.0, 0.0)
    assert b.quota == [(600.0, 4.0), (1200.0, 8.0), (3600.0, 8.0)]
