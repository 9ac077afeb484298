"""``dprobe cluster publish`` warns when the quotas it reports hold more GPUs than the
capacity it reports, as the planner reads both (an overcommitted scheduler's quotas may:
the report is still published; a typo such as ``--quota vc-a=640`` is then seen)."""

from __future__ import annotations

import argparse

import pytest

from dprobe.cli import main
from dprobe.commands.cluster import report_from
from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.models.planner import PlannerSettings


def _held_by_the_planner(capacity: float, quotas: list[str]) -> tuple[int, int]:
    """The reference: the capacity and the quotas' sum a worker's plan loop holds once it
    has read this report (whole nodes of 8 GPUs)."""
    args = argparse.Namespace(
        capacity=capacity, quota=quotas, quotas_csv=None, complete=False, source="cli"
    )
    loop = PlanLoop(LastValue(), PlanLoopSettings(planner=PlannerSettings(node_gpus=8)))
    loop.on_cluster(report_from(args, now=5.0))
    return loop.capacity_gpus, sum(loop.quotas().values())


@pytest.mark.parametrize(
    ("capacity", "quotas"),
    [
        (256.0, ["vc-a=64", "vc-b=192"]),  # exactly the capacity
        (256.0, ["vc-a=640", "vc-b=192"]),  # a digit too many
        (64.0, ["vc-a=40", "vc-b=40"]),  # overcommitted
        (36.0, ["vc-a=16", "vc-b=16"]),  # 32 of 36 (whole nodes): not above
        (32.0, ["vc-a=20", "vc-b=20"]),  # 40 reported, 32 read: within
        (8.0, ["vc-a=16"]),  # one tenant above the capacity
    ],
)
def test_quotas_above_the_capacity_are_warned_of_and_still_published(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    capacity: float, quotas: list[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("DPROBE_WORKER_NODE_GPUS", "8")
    argv = ["--capacity", f"{capacity:g}", *(f for q in quotas for f in ("--quota", q))]
    # nothing listens at port 1: the warnings come before the publish, which then fails
    # for want of a broker (a refused report would fail with its reason instead)
    assert main(["--bootstrap", "127.0.0.1:1", "cluster", "publish", *argv]) == 2
    err = capsys.readouterr().err
    warned = [x for x in err.splitlines() if "more than the capacity" in x]
    held, total = _held_by_the_planner(capacity, quotas)
    if total > held:
        assert warned == [
            f"warning: the quotas sum to {total} GPUs, more than the capacity {held} "
            f"(as the planner reads them, in whole nodes of 8 GPUs): the planner lends "
            f"only quota that tenants leave idle and raises no tenant above {held} GPUs "
            "(right for an overcommitting scheduler; otherwise check the figures)"
        ]
    else:
        assert warned == []
    assert "cannot reach Kafka" in err.splitlines()[-1]


def test_without_a_capacity_the_quotas_are_not_compared(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The capacity in force comes from another report or the settings, unknown here."""
    assert main(["--bootstrap", "127.0.0.1:1", "cluster", "publish", "--quota", "a=4096"]) == 2
    assert "more than the capacity" not in capsys.readouterr().err
