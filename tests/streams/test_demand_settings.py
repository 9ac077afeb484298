"""The worker's demand settings (levels, planner quantile, job flow): from the CLI, the
environment and the TOML file, checked, and carried into the window stage and planner."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.config import ConfigError, WorkerSettings, load
from dprobe.models.job_flow import DEFAULT_EDGES_S
from dprobe.streams.app import plan_settings, window_settings
from dprobe.streams.demand_settings import job_level_of


def test_defaults_are_the_papers_levels_and_the_documented_edges() -> None:
    s = WorkerSettings()
    cfg = window_settings(s)
    assert (cfg.levels.weight("L1"), cfg.levels.weight("EX")) == (0.3, 1.0)
    assert cfg.levels.l1_max_util_pct == 25.0 and cfg.levels.l3_min_sm_util_pct == 70.0
    assert cfg.flow.edges_s == DEFAULT_EDGES_S == s.flow_edges_s
    assert cfg.flow.unknown_level == "EX"
    assert plan_settings(s).planner.quantile == "p90"
    assert job_level_of(s) is not None


def test_every_source_sets_them(tmp_path: Path) -> None:
    toml = tmp_path / "w.toml"
    toml.write_text("[worker]\nlevel_weights = [0.2, 0.4, 0.6, 1.0]\nflow_edges_s = [30, 300]\n")
    s = load(
        WorkerSettings,
        cli={"plan_quantile": "p50"},
        env={
            "DPROBE_WORKER_UNKNOWN_PENDING_LEVEL": "L2",
            "DPROBE_WORKER_PROFILE_PENDING": "0",
            "DPROBE_WORKER_LEVEL_L3_MIN_UTIL_PCT": "80",
        },
        file=toml,
    )
    cfg = window_settings(s)
    assert cfg.levels.weight("L3") == 0.6 and cfg.levels.l3_min_util_pct == 80.0
    assert cfg.flow.edges_s == (30.0, 300.0) and cfg.flow.unknown_level == "L2"
    assert plan_settings(s).planner.quantile == "p50"
    assert job_level_of(s) is None


def test_the_planners_sizing_and_damping_come_from_the_settings(tmp_path: Path) -> None:
    default = plan_settings(WorkerSettings()).planner
    assert (default.headroom, default.damping.tolerance, default.damping.cooldown_s) == (
        0.0,
        0.1,
        60.0,
    )
    assert default.damping.scale_down_stabilization_s == 300.0
    toml = tmp_path / "w.toml"
    toml.write_text("[worker]\nplan_tolerance = 0.05\n")
    s = load(
        WorkerSettings,
        cli={"plan_headroom": "0.2"},
        env={
            "DPROBE_WORKER_PLAN_COOLDOWN_S": "0",
            "DPROBE_WORKER_PLAN_SCALE_DOWN_STABILIZATION_S": "900",
        },
        file=toml,
    )
    planner = plan_settings(s).planner
    assert planner.headroom == 0.2 and planner.damping.tolerance == 0.05
    assert planner.damping.cooldown_s == 0.0
    assert planner.damping.scale_down_stabilization_s == 900.0


def test_the_rate_limits_and_urgent_pass_come_from_the_settings() -> None:
    from dprobe.models.planner_damping import MoveHistory, damp, record

    default = plan_settings(WorkerSettings()).planner
    d = default.damping  # Kubernetes HPA's behavior defaults, as docs/planner.md states
    assert (d.scale_up_stabilization_s, d.period_s) == (0.0, 15.0)
    assert (d.scale_up_max_percent, d.scale_up_max_nodes, d.scale_down_max_percent) == (
        100.0,
        4,
        100.0,
    )
    assert default.urgent_first is True
    s = load(
        WorkerSettings,
        cli={"plan_scale_up_max_nodes": "2", "plan_urgent_first": "false"},
        env={"DPROBE_WORKER_PLAN_PERIOD_S": "600", "DPROBE_WORKER_PLAN_SCALE_UP_MAX_PERCENT": "0"},
    )
    planner = plan_settings(s).planner
    assert planner.urgent_first is False
    # docs/planner.md's example: at most two nodes more per tenant every ten minutes
    h, quota, grown = MoveHistory(), 16, []
    for ts in (0.0, 60.0, 300.0, 601.0, 660.0):
        target = damp(planner.damping, h, ts=ts, current=quota, desired=128, node_gpus=8)
        record(h, ts=ts, delta=target - quota)
        grown.append(target - quota)
        quota = target
    assert grown == [16, 0, 0, 16, 0]


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"DPROBE_WORKER_PLAN_QUANTILE": "p75"}, "plan_quantile"),
        ({"DPROBE_WORKER_UNKNOWN_PENDING_LEVEL": "L4"}, "unknown_pending_level"),
        ({"DPROBE_WORKER_LEVEL_WEIGHTS": "0.3,0.5"}, "level_weights"),
        ({"DPROBE_WORKER_LEVEL_WEIGHTS": "0.3,0.5,0.7,2"}, "level_weights"),
        ({"DPROBE_WORKER_FLOW_EDGES_S": "60,30"}, "flow_edges_s"),
        ({"DPROBE_WORKER_LEVEL_EX_MIN_MEM_FRAC": "0"}, "level_ex_min_mem_frac"),
        ({"DPROBE_WORKER_PLAN_HEADROOM": "-0.1"}, "plan_headroom"),
        ({"DPROBE_WORKER_PLAN_TOLERANCE": "1"}, "plan_tolerance"),
        ({"DPROBE_WORKER_PLAN_COOLDOWN_S": "-1"}, "plan_cooldown_s"),
        ({"DPROBE_WORKER_PLAN_PERIOD_S": "0"}, "plan_period_s"),
        ({"DPROBE_WORKER_PLAN_PERIOD_S": "3600"}, "plan_period_s"),
        ({"DPROBE_WORKER_PLAN_SCALE_UP_MAX_NODES": "-1"}, "plan_scale_up_max_nodes"),
        ({"DPROBE_WORKER_PLAN_SCALE_UP_STABILIZATION_S": "-5"}, "up_stabilization_s"),
        ({"DPROBE_WORKER_PLAN_URGENT_FIRST": "maybe"}, "PLAN_URGENT_FIRST"),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load(WorkerSettings, env=env)


def test_the_worker_command_has_a_flag_for_each() -> None:
    import argparse

    from dprobe.commands.worker import DEMAND_FLAGS, add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--plan-quantile", "p50", "--flow-edges-s", "10,100"])
    assert (args.plan_quantile, args.flow_edges_s) == ("p50", "10,100")
    fields = set(WorkerSettings.__dataclass_fields__)
    assert {dest for _, dest, _ in DEMAND_FLAGS} <= fields
