"""HPA damping rules, each against a hand-computed value."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dprobe.models.planner_damping import (
    DampingSettings,
    MoveHistory,
    apply_tolerance,
    damp,
    lowest_quota,
    record,
)


def test_tolerance_is_ten_percent_of_the_current_quota() -> None:
    s = DampingSettings()
    assert apply_tolerance(s, 100, 110) == 100  # |110-100| = 10 <= 10
    assert apply_tolerance(s, 100, 111) == 111
    assert apply_tolerance(s, 0, 8) == 8  # nothing to be tolerant around


def test_scale_up_rate_limit_is_the_larger_of_100_percent_and_4_nodes_per_period() -> None:
    s = DampingSettings()
    # from 8 GPUs: max(8*2, 8 + 4*8) = 40 -> at most +32
    assert damp(s, MoveHistory(), ts=0.0, current=8, desired=200, node_gpus=8) == 40
    # from 64 GPUs: max(128, 96) = 128 -> +64
    assert damp(s, MoveHistory(), ts=0.0, current=64, desired=200, node_gpus=8) == 128
    # within one 15 s period the budget is shared: +32 at t=0 leaves 40-40=0 at t=10
    h = MoveHistory()
    record(h, ts=0.0, delta=32)
    assert damp(s, h, ts=10.0, current=40, desired=200, node_gpus=8) == 40
    # and is whole again once the period has passed: from 40, max(80, 72) = 80
    assert damp(s, h, ts=16.0, current=40, desired=200, node_gpus=8) == 80


def test_cooldown_blocks_a_reversal_only() -> None:
    s = DampingSettings(cooldown_s=60.0, scale_down_stabilization_s=0.0)

    def after_up() -> MoveHistory:
        h = MoveHistory()
        record(h, ts=0.0, delta=8)
        return h

    assert damp(s, after_up(), ts=30.0, current=16, desired=8, node_gpus=8) == 16  # reversal
    assert damp(s, after_up(), ts=30.0, current=16, desired=32, node_gpus=8) == 32  # same way
    assert damp(s, after_up(), ts=61.0, current=16, desired=8, node_gpus=8) == 8  # over


_NUMBERS = (
    "tolerance",
    "scale_up_stabilization_s",
    "scale_down_stabilization_s",
    "period_s",
    "scale_up_max_percent",
    "scale_down_max_percent",
    "cooldown_s",
)


@pytest.mark.parametrize("name", _NUMBERS)
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_setting_that_is_no_finite_number_is_refused_by_name(name: str, value: float) -> None:
    # NaN passed the ``< 0`` check and then silently switched its rule off (a NaN
    # tolerance or cooldown holds nothing back) or failed inside the plan
    with pytest.raises(ValueError, match=f"^{name} must be a finite number"):
        DampingSettings(**{name: value})  # type: ignore[arg-type]


def test_a_nan_tolerance_would_have_let_a_small_change_through() -> None:
    """The rule a NaN switched off: 86 GPUs wanted against 80 held is within 10 %."""
    assert apply_tolerance(DampingSettings(tolerance=0.1), 80, 86) == 80
    with pytest.raises(ValueError, match="tolerance"):
        DampingSettings(tolerance=math.nan)


@pytest.mark.parametrize("nodes", [1.5, True, -1])
def test_scale_up_max_nodes_is_a_whole_number_of_nodes(nodes: object) -> None:
    with pytest.raises(ValueError, match=r"^scale_up_max_nodes must be a whole number >= 0"):
        DampingSettings(scale_up_max_nodes=nodes)  # type: ignore[arg-type]


def test_lowest_quota_is_what_the_scale_down_limit_leaves_in_the_period() -> None:
    h = MoveHistory()
    record(h, ts=0.0, delta=-16)  # 64 -> 48 at t=0
    half = DampingSettings(scale_down_max_percent=50.0)
    # the period started at 64: at most 32 down in it, 16 of them taken
    assert lowest_quota(half, h, ts=10.0, current=48, node_gpus=8) == 32
    assert lowest_quota(half, h, ts=20.0, current=48, node_gpus=8) == 24  # a new period
    assert lowest_quota(DampingSettings(), h, ts=10.0, current=48, node_gpus=8) == 0
    frozen = DampingSettings(scale_down_max_percent=0.0)
    assert lowest_quota(frozen, h, ts=10.0, current=48, node_gpus=8) == 48


@pytest.mark.parametrize(
    ("percent", "current"), [(13.0, 800), (16.0, 200), (18.0, 1200), (36.0, 600)]
)
def test_a_percentage_that_is_a_whole_number_of_nodes_allows_all_of_them(
    percent: float, current: int
) -> None:
    # exactly 13 % of 800 GPUs is 104 GPUs, 13 nodes: 800 * 1.13 reads 903.99... in floating
    # point, and the limit lost the last node (as 18 % of 1200 lost one on the way down)
    exact = math.floor(Fraction(current) * Fraction(percent) / 100 / 8) * 8  # reference
    up = DampingSettings(scale_up_max_percent=percent, scale_up_max_nodes=0)
    assert damp(up, MoveHistory(), ts=0.0, current=current, desired=10**6, node_gpus=8) == (
        current + exact
    )
    down = DampingSettings(scale_down_max_percent=percent)
    assert lowest_quota(down, MoveHistory(), ts=0.0, current=current, node_gpus=8) == (
        current - exact
    )


@pytest.mark.parametrize(
    ("tolerance", "current", "desired"), [(0.29, 800, 1032), (0.35, 1440, 936)]
)
def test_a_change_exactly_at_the_tolerance_is_within_it(
    tolerance: float, current: int, desired: int
) -> None:
    # |1032 - 800| is exactly 29 % of 800 (232 GPUs), but 0.29 * 800 is 231.99... in
    # floating point: a change on the band's edge went through
    assert abs(Fraction(desired - current)) == Fraction(current) * Fraction(str(tolerance))
    assert apply_tolerance(DampingSettings(tolerance=tolerance), current, desired) == current
