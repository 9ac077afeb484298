"""docs/planner.md's first example runs as shown and plans what its text describes."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "planner.md"


def test_the_planner_example_runs_as_shown() -> None:
    block = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert block is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.group(1), str(DOC), "exec"), {})
    moves = [line.split() for line in out.getvalue().splitlines()]
    by_tenant = {m[1]: m for m in moves}
    assert sorted(by_tenant) == ["vc-a", "vc-b"]
    assert len({m[0] for m in moves}) == 1  # one plan
    assert by_tenant["vc-a"][2] == "scale_up" and by_tenant["vc-b"][2] == "scale_down"
    # vc-a is raised to at least its p90 (88 GPUs, whole 8-GPU nodes) and the plan
    # moves quota, creating none
    assert float(by_tenant["vc-a"][4]) >= 88.0
    assert sum(float(m[5]) for m in moves) == 0.0


def test_a_raise_beyond_the_need_names_the_forecast_too() -> None:
    """vc-a needs 72 GPUs now and is forecast at p90 88: the move to 88 says both."""
    from dprobe.models.planner import PlanInput, Planner, TenantState

    def plan(need: float) -> str:
        a = TenantState("a", quota_gpus=64, guaranteed_gpus=0, idle_gpus=0, p50=70.0,
                        p90=88.0, horizon_s=600, need_gpus=need)  # fmt: skip
        b = TenantState("b", quota_gpus=512, guaranteed_gpus=0, idle_gpus=320, p50=90.0,
                        p90=120.0, horizon_s=600)  # fmt: skip
        moves = Planner().plan(PlanInput(ts=0.0, capacity_gpus=576, tenants=(a, b))).moves
        (up,) = [d for d in moves if d.tenant == "a"]
        assert up.reason == "waiting_jobs" and up.target_quota_gpus == 88
        return up.message

    assert plan(72.0) == (
        "64 -> 88 GPUs for the jobs running and waiting now (need 72) and the forecast "
        "(p90=88.0 p50=70.0 GPUs at 600s)"
    )
    assert plan(88.0) == "64 -> 88 GPUs for the jobs running and waiting now (need 88)"


def _section(start: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    at = text.index(start)
    return text[at : text.index("\n\n", at)]


def test_every_reason_the_planner_gives_is_in_the_reason_table() -> None:
    from typing import get_args

    from dprobe.models.planner import Reason

    table = _section("| reason | when |")
    rows = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert rows == set(get_args(Reason))


def test_every_field_of_a_scaling_event_is_named() -> None:
    """A scheduler applies whole plans in order from ``plan_seq`` and ``plan_size``: the
    paragraph on ``scaling_events`` names every field the events carry."""
    from dprobe.schema import ScalingEvent

    para = _section("`dprobe.models.planner_events.scaling_events(")
    named = set(re.findall(r"`(\w+)`", para))
    assert {"v", *ScalingEvent.__struct_fields__} <= named
