"""The Kueue example: event -> ClusterQueue merge patch, whole plans only, no duplicates."""

from __future__ import annotations

import doctest
import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dprobe.schema import Forecast, ModelInfo, ScalingEvent, encode

PATH = Path(__file__).resolve().parents[2] / "examples" / "kueue_quota_consumer.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kueue_quota_consumer", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


kq = _load()


def ev(eid: str, tenant: str, current: float, target: float, plan: str = "p1") -> ScalingEvent:
    return ScalingEvent(
        event_id=eid,
        plan_id=plan,
        ts=1.7e9,
        time="2023-11-14T22:13:20Z",
        tenant=tenant,
        action="scale_up" if target > current else "scale_down",
        current_quota_gpus=current,
        target_quota_gpus=target,
        delta_gpus=target - current,
        forecast=Forecast(horizon_s=3600, p50=1, p90=2),
        reason="r",
        message="m",
        model=ModelInfo(name="m", version="1"),
    )


def _patch_of(line: str) -> tuple[str, dict]:
    words = shlex.split(line)
    assert words[:3] == ["kubectl", "patch", "clusterqueue"]
    assert words[4:6] == ["--type=merge", "-p"]
    return words[3], json.loads(words[6])


def test_patch_sets_the_gpu_nominal_quota_of_the_flavor() -> None:
    patch = kq.cluster_queue_patch(16.0, flavor="a100")
    assert patch == {
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}],
                        }
                    ],
                }
            ]
        }
    }
    assert isinstance(
        patch["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"], int
    )


@pytest.mark.parametrize("bad", [2.5, -8.0])
def test_fractional_or_negative_gpu_quota_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="whole"):
        kq.cluster_queue_patch(bad, flavor="f")


def test_kubectl_line_round_trips_through_a_shell_and_quotes_names() -> None:
    line = kq.kubectl_line("team a", {"spec": {"x": "it's"}})
    name, patch = _patch_of(line)
    assert name == "team a"
    assert patch == {"spec": {"x": "it's"}}


def test_a_plan_is_released_only_when_balanced_and_scale_downs_come_first() -> None:
    plans = kq.PlanAssembler()
    assert plans.add(ev("e1", "vc-a", 8, 24)) == []
    assert plans.add(ev("e2", "vc-b", 16, 8)) == []  # +16 -8: not balanced yet
    assert plans.add(ev("e1", "vc-a", 8, 24)) == []  # duplicate: dropped, no double count
    done = plans.add(ev("e3", "vc-c", 8, 0))
    assert [e.event_id for e in done] == ["e1", "e2", "e3"]
    assert plans.duplicates == 1 and plans.pending_plans == 0
    lines = kq.plan_commands(done, queue_for={"vc-a": "team-a"}, flavor="default-flavor")
    queues = [_patch_of(line)[0] for line in lines]
    assert queues == ["vc-b", "vc-c", "team-a"]  # quota given back before quota granted
    quotas = [
        _patch_of(line)[1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
        for line in lines
    ]
    assert [q["nominalQuota"] for q in quotas] == [8, 0, 24]


def test_plans_are_kept_apart_and_a_stale_half_plan_expires() -> None:
    now = [0.0]
    plans = kq.PlanAssembler(max_age_s=60, clock=lambda: now[0])
    plans.add(ev("a1", "vc-a", 8, 16, plan="p1"))
    assert plans.add(ev("b1", "vc-b", 16, 8, plan="p2")) == []  # other plan: no balance
    now[0] = 61.0
    assert plans.add(ev("c1", "vc-c", 8, 0, plan="p3")) == []
    assert plans.expired == 2 and plans.pending_plans == 1
    assert plans.add(ev("a2", "vc-a", 16, 24, plan="p1")) == []  # p1's first half is gone


def test_queue_map_parsing() -> None:
    assert kq.parse_queue_map("") == {}
    assert kq.parse_queue_map("vc-a=team-a,vc-b = team-b") == {"vc-a": "team-a", "vc-b": "team-b"}
    with pytest.raises(ValueError, match="TENANT=CLUSTERQUEUE"):
        kq.parse_queue_map("vc-a")


def test_stdin_mode_prints_runnable_kubectl_lines_for_whole_plans() -> None:
    lines = [
        encode(ev("e1", "vc-a", 8, 16)),
        b"{garbage",
        encode(ev("e1", "vc-a", 8, 16)),
        encode(ev("x1", "vc-x", 4, 8, plan="half")),  # its other half never comes
        encode(ev("e2", "vc-b", 16, 8)),
    ]
    res = subprocess.run(
        [sys.executable, str(PATH), "--stdin", "--queue-map", "vc-b=team-b", "--flavor", "h100"],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout.decode().splitlines()
    assert out[0] == "# plan p1: vc-a +8, vc-b -8"
    assert [_patch_of(line)[0] for line in out[1:]] == ["team-b", "vc-a"]
    err = res.stderr.decode()
    assert "invalid event" in err
    assert "1 plans printed, 1 duplicates dropped, 1 plans incomplete or expired" in err


def test_docstring_examples_run() -> None:
    result = doctest.testmod(kq)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.integration
async def test_kafka_mode_prints_whole_plans_and_commits_them(kafka) -> None:
    from aiokafka import AIOKafkaProducer

    topic = await kafka.create_topic("scaling-events", partitions=2)
    group = kafka.unique("kueue")
    records = [
        (0, encode(ev("e1", "vc-a", 8, 16))),
        (1, encode(ev("e2", "vc-b", 16, 8))),
        (1, encode(ev("e2", "vc-b", 16, 8))),  # duplicate
        (0, encode(ev("f1", "vc-a", 16, 12, plan="p2"))),
        (1, encode(ev("f2", "vc-c", 4, 8, plan="p2"))),
    ]
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for partition, value in records:
            await producer.send_and_wait(topic, value, partition=partition)

    def run(*extra: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(PATH), "--bootstrap", kafka.bootstrap, "--topic", topic,
               "--group", group, "--from-beginning", *extra]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)

    res = run("--max-plans", "2")
    assert res.returncode == 0, res.stderr
    assert _plans(res.stdout) == {
        "p1": {"vc-a +8", "vc-b -8"},
        "p2": {"vc-a -4", "vc-c +4"},
    }
    assert (
        sum(line.startswith("kubectl patch clusterqueue") for line in res.stdout.splitlines()) == 4
    )
    # everything was applied and committed: a restart of the same group prints nothing new
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(topic, encode(ev("g1", "vc-d", 8, 4, plan="p3")), partition=0)
        await producer.send_and_wait(topic, encode(ev("g2", "vc-e", 4, 8, plan="p3")), partition=1)
    again = run("--max-plans", "1")
    assert again.returncode == 0, again.stderr
    assert _plans(again.stdout) == {"p3": {"vc-d -4", "vc-e +4"}}


def _plans(stdout: str) -> dict[str, set[str]]:
    """``# plan ID: vc-a +8, vc-b -8`` lines -> ``{ID: {"vc-a +8", "vc-b -8"}}``."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("# plan "):
            plan, _, moves = line.removeprefix("# plan ").partition(": ")
            out[plan] = set(moves.split(", "))
    return out
