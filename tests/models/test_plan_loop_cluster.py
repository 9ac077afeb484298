"""PlanLoop and what the scheduler reports (ClusterReport): reported capacity and quotas
replace the loop's guesses, quiet tenants lend what they hold, and a checkpoint saved
under other cluster settings keeps its forecaster but not its quotas."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.schema import ClusterReport, ScalingEvent, TenantWindow
from tests.models.windows import demand_window

W = 60.0


def _window(tenant: str, end: float, running: float, pending: float = 0.0) -> TenantWindow:
    return demand_window(tenant, end, running=running, pending=pending, length_s=W)


def _loop(capacity: int = 64) -> PlanLoop:
    return PlanLoop(LastValue(), PlanLoopSettings(capacity_gpus=capacity, horizon_s=W))


def _step(loop: PlanLoop, end: float, demand: dict[str, tuple[float, float]]) -> list[ScalingEvent]:
    windows = [_window(t, end, running, pending) for t, (running, pending) in demand.items()]
    return loop.plan_end(end, windows)


def _moves(events: list[ScalingEvent]) -> dict[str, tuple[float, float]]:
    return {e.tenant: (e.current_quota_gpus, e.target_quota_gpus) for e in events}


def test_reported_quotas_replace_the_even_split_and_unlisted_tenants_start_at_zero() -> None:
    loop = _loop(capacity=64)
    loop.on_cluster(ClusterReport(ts=0.0, source="kueue", capacity_gpus=48, quotas={"a": 40}))
    # a needs 8 GPUs and holds 40; b's job of 16 GPUs waits and it holds nothing
    events = _step(loop, W, {"a": (8.0, 0.0), "b": (0.0, 16.0)})
    assert loop.capacity_gpus == 48
    assert _moves(events) == {"a": (40.0, 24.0), "b": (0.0, 16.0)}
    assert sum(e.delta_gpus for e in events) == 0


def test_without_a_report_the_setting_is_split_evenly_as_before() -> None:
    loop = _loop(capacity=64)
    _step(loop, W, {"a": (8.0, 0.0), "b": (8.0, 0.0)})
    assert loop.quotas() == {"a": 32, "b": 32}
    assert loop.capacity_gpus == 64


def test_a_newer_report_wins_over_the_loops_own_bookkeeping() -> None:
    loop = _loop(capacity=64)
    _step(loop, W, {"a": (8.0, 0.0), "b": (8.0, 0.0)})
    # an operator moved quota by hand: the scheduler says so
    loop.on_cluster(ClusterReport(ts=W, source="kueue", quotas={"a": 8, "b": 56}))
    assert loop.quotas() == {"a": 8, "b": 56}
    events = _step(loop, 2 * W, {"a": (8.0, 24.0), "b": (8.0, 0.0)})
    moves = _moves(events)
    assert moves["a"][0] == 8.0 and moves["b"][0] == 56.0  # planned from the report
    assert moves["a"][1] >= 32.0  # its waiting job gets its nodes from b's idle ones
    assert sum(e.delta_gpus for e in events) == 0


def test_reported_gpus_are_rounded_down_to_whole_nodes() -> None:
    loop = _loop()
    loop.on_cluster(ClusterReport(ts=0.0, source="s", capacity_gpus=36.0, quotas={"a": 20.0}))
    assert loop.capacity_gpus == 32 and loop.quotas() == {"a": 16}


def test_a_complete_report_takes_quota_from_tenants_it_does_not_list() -> None:
    loop = _loop(capacity=32)
    _step(loop, W, {"a": (8.0, 0.0), "b": (8.0, 0.0)})
    assert loop.quotas() == {"a": 16, "b": 16}
    loop.on_cluster(ClusterReport(ts=W, source="s", quotas={"a": 32}, complete=True))
    assert loop.quotas() == {"a": 32, "b": 0}
    partial = _loop(capacity=32)
    _step(partial, W, {"a": (8.0, 0.0), "b": (8.0, 0.0)})
    partial.on_cluster(ClusterReport(ts=W, source="s", quotas={"a": 16}))
    assert partial.quotas() == {"a": 16, "b": 16}  # not complete: b keeps what it had


def test_a_complete_report_that_leaves_out_windowed_tenants_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A report naming tenants by their ClusterQueues (team-a) where the windows name VCs
    (a, b) takes every VC's quota away; the log names both sides."""
    loop = _loop(capacity=32)
    _step(loop, W, {"a": (8.0, 0.0), "b": (8.0, 0.0)})
    with caplog.at_level(logging.WARNING, logger="dprobe.models.plan_loop"):
        loop.on_cluster(
            ClusterReport(ts=W, source="kueue", quotas={"team-a": 16, "b": 16}, complete=True)
        )
        loop.on_cluster(
            ClusterReport(ts=W, source="kueue", quotas={"a": 0, "b": 32}, complete=True)
        )
    assert [r.getMessage() for r in caplog.records] == [
        "complete cluster report from kueue gives no quota to 1 tenant(s) that send windows: "
        "a; they hold 0 GPUs from now on (it names team-a, which no window names: does the "
        "report name tenants as the collectors do?)"
    ]  # the second report lists a (at 0): nothing to say
    assert loop.quotas() == {"a": 0, "b": 32, "team-a": 0}


def test_a_complete_report_read_before_any_window_says_so_at_a_left_out_tenant_s_first(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A worker that starts reads the compacted cluster topic before any window closes: the
    tenants the report leaves out are told of at their first window, once, and a tenant
    that a report since gave a quota is not; a restarted loop remembers both."""
    loop = _loop(capacity=32)
    with caplog.at_level(logging.WARNING, logger="dprobe.models.plan_loop"):
        loop.on_cluster(
            ClusterReport(ts=0.0, source="kueue", quotas={"team-a": 16, "b": 16}, complete=True)
        )
        loop.on_cluster(ClusterReport(ts=0.0, source="ops", quotas={"c": 0}))
        _step(loop, W, {"a": (8.0, 0.0), "b": (8.0, 0.0), "c": (0.0, 0.0)})
        _step(loop, 2 * W, {"a": (8.0, 0.0), "b": (8.0, 0.0), "c": (0.0, 0.0)})
        loop.save(tmp_path / "loop.ckpt")
        again = _loop(capacity=32)
        again.load(tmp_path / "loop.ckpt")
        _step(again, 3 * W, {"a": (8.0, 0.0), "b": (8.0, 0.0), "d": (8.0, 0.0)})
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"complete cluster report from kueue gives no quota to 1 tenant(s) that send windows: "
        f"{t}; they hold 0 GPUs from now on (it names team-a, which no window names: does the "
        "report name tenants as the collectors do?)"
        for t in ("a", "d")
    ]  # b and c: a report gave them a quota; a after the restart: not its first window


def test_a_quiet_tenant_that_holds_quota_lends_its_idle_nodes() -> None:
    loop = _loop(capacity=64)
    loop.on_cluster(ClusterReport(ts=0.0, source="s", quotas={"idle-vc": 48, "b": 16}))
    # idle-vc never sends a window (nothing runs there); b's 32-GPU job waits
    events = _step(loop, W, {"b": (16.0, 32.0)})
    assert _moves(events) == {"b": (16.0, 48.0), "idle-vc": (48.0, 16.0)}


def test_a_smaller_reported_capacity_re_splits_only_the_guessed_quotas() -> None:
    loop = _loop(capacity=64)
    _step(loop, W, {"a": (8.0, 0.0), "b": (8.0, 0.0), "c": (8.0, 0.0)})
    assert sum(loop.quotas().values()) == 64
    loop.on_cluster(ClusterReport(ts=W, source="s", capacity_gpus=32, quotas={"c": 16}))
    _step(loop, 2 * W, {"a": (8.0, 0.0), "b": (8.0, 0.0), "c": (8.0, 0.0)})
    quotas = loop.quotas()
    assert quotas["c"] == 16 and quotas["a"] + quotas["b"] == 16
    assert sum(quotas.values()) <= 32


def test_no_tenant_is_raised_past_a_capacity_smaller_than_the_reported_quotas() -> None:
    loop = _loop(capacity=64)
    # half the nodes are gone, and the scheduler still reports the quotas of before
    loop.on_cluster(ClusterReport(ts=0.0, source="s", capacity_gpus=32, quotas={"a": 32, "b": 32}))
    events = _step(loop, W, {"a": (8.0, 56.0), "b": (0.0, 0.0)})  # a's jobs want 64 GPUs
    assert all(e.target_quota_gpus <= 32 for e in events), _moves(events)
    assert max(loop.quotas().values()) <= loop.capacity_gpus == 32
    assert sum(e.delta_gpus for e in events) == 0


def test_a_smaller_capacity_shrinks_guessed_quotas_in_proportion_and_gives_none_away() -> None:
    loop = PlanLoop(
        LastValue(),
        PlanLoopSettings(capacity_gpus=64, horizon_s=W, initial_quotas={"a": 48, "b": 16}),
    )
    _step(loop, W, {"a": (48.0, 0.0), "b": (16.0, 0.0), "gone": (0.0, 0.0)})
    assert loop.quotas() == {"a": 48, "b": 16, "gone": 0}  # the loop's own moves stand
    loop.on_cluster(ClusterReport(ts=W, source="s", capacity_gpus=32))  # capacity only
    _step(loop, 2 * W, {"a": (24.0, 0.0), "b": (8.0, 0.0), "gone": (0.0, 0.0)})
    assert loop.quotas() == {"a": 24, "b": 8, "gone": 0}  # 3:1 as before; none to "gone"


def test_settings_that_differ_from_the_checkpoint_win_and_say_what_changed(
    tmp_path: Path,
) -> None:
    old = _loop(capacity=64)
    for k in range(1, 4):
        _step(old, k * W, {"a": (8.0, 0.0), "b": (40.0, 0.0)})
    path = tmp_path / "plan-loop.ckpt"
    old.save(path)

    same = _loop(capacity=64)
    assert same.load(path) and same.settings_changed is None
    assert same.quotas() == old.quotas()

    smaller = _loop(capacity=16)
    assert smaller.load(path)
    assert smaller.settings_changed == "capacity_gpus 64 -> 16"
    assert smaller.quotas() == {}
    assert smaller.forecaster.forecast("b", [W])[W][0] == 40.0  # what it learned stays
    _step(smaller, 4 * W, {"a": (8.0, 0.0), "b": (8.0, 0.0)})
    assert smaller.quotas() == {"a": 8, "b": 8}
    assert smaller.capacity_gpus == 16


def test_reports_survive_a_checkpoint(tmp_path: Path) -> None:
    loop = _loop(capacity=64)
    loop.on_cluster(ClusterReport(ts=0.0, source="s", capacity_gpus=24, quotas={"a": 16}))
    _step(loop, W, {"a": (8.0, 0.0), "b": (8.0, 0.0)})
    path = tmp_path / "plan-loop.ckpt"
    loop.save(path)
    back = _loop(capacity=64)
    assert back.load(path) and back.settings_changed is None
    assert back.capacity_gpus == 24 and back.quotas() == loop.quotas()


def test_a_checkpoint_of_another_model_keeps_the_quotas_and_starts_the_model_fresh(
    tmp_path: Path,
) -> None:
    from dprobe.models.forecast.registry import make_forecaster

    old = _loop(capacity=64)
    for k in range(1, 4):
        _step(old, k * W, {"a": (8.0, 0.0), "b": (40.0, 0.0)})
    path = tmp_path / "plan-loop.ckpt"
    old.save(path)
    settings = PlanLoopSettings(capacity_gpus=64, horizon_s=W)
    new = PlanLoop(make_forecaster("holt-winters"), settings)
    assert new.load(path)
    assert new.settings_changed == "model 'last-value' -> 'holt-winters'"
    assert new.quotas() == old.quotas()  # what the scheduler holds is still true
    assert new.forecaster.state_dict() == make_forecaster("holt-winters").state_dict()
    events = _step(new, 4 * W, {"a": (8.0, 0.0), "b": (40.0, 0.0)})  # plans, no KeyError
    assert sum(e.delta_gpus for e in events) == 0


@pytest.mark.parametrize("before_first_plan", [True, False])
def test_a_complete_report_without_quotas_leaves_every_tenant_none_whenever_it_comes(
    before_first_plan: bool, tmp_path: Path
) -> None:
    """A complete report's rule (tenants not listed hold none) holds for one that lists no
    tenant too, whether it comes before the first plan (no even split is guessed then) or
    after; and a restart from a checkpoint keeps it so."""
    report = ClusterReport(ts=0.0, source="s", capacity_gpus=32, quotas={}, complete=True)
    loop = _loop(capacity=32)
    if before_first_plan:
        loop.on_cluster(report)
    else:
        _step(loop, W, {"a": (8.0, 0.0), "b": (8.0, 0.0)})
        loop.on_cluster(report)
    events = _step(loop, 2 * W, {"a": (8.0, 0.0), "b": (8.0, 0.0)})
    assert loop.quotas() == {"a": 0, "b": 0}
    assert events == []  # nobody holds anything to lend
    loop.save(tmp_path / "loop.ckpt")
    again = _loop(capacity=32)
    assert again.load(tmp_path / "loop.ckpt")
    _step(again, 3 * W, {"a": (8.0, 0.0), "b": (8.0, 0.0), "c": (8.0, 0.0)})
    assert again.quotas() == {"a": 0, "b": 0, "c": 0}
