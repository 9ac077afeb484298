"""The Kueue example: event -> a JSON patch of one ClusterQueue quota entry, whole plans
only, donors first, no duplicates; a failure stops what comes after it."""

from __future__ import annotations

import argparse
import asyncio
import copy
import doctest
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, NamedTuple

import pytest

from dprobe.schema import Forecast, ModelInfo, ScalingEvent, encode
from tests.examples.fake_kubectl import apply_json_patch

PATH = Path(__file__).resolve().parents[2] / "examples" / "kueue_quota_consumer.py"
FAKE_KUBECTL = Path(__file__).resolve().parent / "fake_kubectl.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kueue_quota_consumer", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


kq = _load()


def ev(
    eid: str,
    tenant: str,
    current: float,
    target: float,
    plan: str = "p1",
    *,
    size: int = 0,
    seq: int = 0,
) -> ScalingEvent:
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
        plan_size=size,
        plan_seq=seq,
    )


def cluster_queue(name: str, gpus: int = 16, *, version: str | None = "41") -> dict[str, Any]:
    """A ClusterQueue with CPU and memory quota, two GPU flavors, borrowing and lending."""
    metadata: dict[str, Any] = {"name": name}
    if version is not None:
        metadata["resourceVersion"] = version
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": metadata,
        "spec": {
            "cohort": "gpu-pool",
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "memory", "nominalQuota": "256Gi"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "96", "borrowingLimit": "32"},
                                {
                                    "name": "nvidia.com/gpu",
                                    "nominalQuota": str(gpus),
                                    "borrowingLimit": "8",
                                    "lendingLimit": "12",
                                },
                            ],
                        },
                        {
                            "name": "h100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "96"},
                                {
                                    "name": "nvidia.com/gpu",
                                    "nominalQuota": "8",
                                    "borrowingLimit": "4",
                                    "lendingLimit": "4",
                                },
                            ],
                        },
                    ],
                },
            ],
        },
    }


def _gpu(cq: dict[str, Any], flavor: str) -> dict[str, Any]:
    (entry,) = [
        res
        for group in cq["spec"]["resourceGroups"]
        for fl in group["flavors"]
        if fl["name"] == flavor
        for res in fl["resources"]
        if res["name"] == "nvidia.com/gpu"
    ]
    return entry


def _expected(cq: dict[str, Any], flavor: str, **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(cq)
    _gpu(out, flavor).update(changes)
    return out


def test_the_patch_changes_only_the_gpu_quota_of_the_flavor() -> None:
    cq = cluster_queue("team-a")
    patch = kq.quota_patch(cq, 24, flavor="a100")
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    after = apply_json_patch(copy.deepcopy(cq), patch)
    # CPU, memory, the other flavor, borrowingLimit and lendingLimit all stay
    assert after == _expected(cq, "a100", nominalQuota=24)


@pytest.mark.parametrize(("flavor", "gpus"), [("a100", 8), ("h100", 2), ("a100", 0)])
def test_a_lending_limit_above_the_new_quota_is_lowered_to_it(flavor: str, gpus: int) -> None:
    cq = cluster_queue("team-a")
    after = apply_json_patch(copy.deepcopy(cq), kq.quota_patch(cq, gpus, flavor=flavor))
    assert after == _expected(cq, flavor, nominalQuota=gpus, lendingLimit=gpus)


def test_a_change_made_after_the_read_makes_the_patch_fail() -> None:
    cq = cluster_queue("team-a")
    patch = kq.quota_patch(cq, 8, flavor="a100")
    meanwhile = copy.deepcopy(cq)
    meanwhile["metadata"]["resourceVersion"] = "42"
    with pytest.raises(ValueError, match="resourceVersion"):
        apply_json_patch(meanwhile, patch)
    # without a resourceVersion, the old values are what is tested
    bare = cluster_queue("team-a", version=None)
    patch = kq.quota_patch(bare, 8, flavor="a100")
    moved = copy.deepcopy(bare)
    _gpu(moved, "a100")["nominalQuota"] = "20"
    with pytest.raises(ValueError, match="test failed"):
        apply_json_patch(moved, patch)
    assert apply_json_patch(copy.deepcopy(bare), patch) == _expected(
        bare, "a100", nominalQuota=8, lendingLimit=8
    )


def test_no_patch_when_the_quota_is_already_set_and_a_missing_flavor_is_an_error() -> None:
    cq = cluster_queue("team-a")
    assert kq.quota_patch(cq, 16, flavor="a100") == []
    with pytest.raises(ValueError, match=r"no nvidia\.com/gpu quota in flavor v100"):
        kq.quota_patch(cq, 16, flavor="v100")


@pytest.mark.parametrize("bad", [2.5, -8.0])
def test_fractional_or_negative_gpu_quota_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="whole"):
        kq.whole_gpus(bad)
    with pytest.raises(kq.PlanRefused, match="whole"):
        kq.plan_moves([ev("e1", "vc-a", 8, bad)], queue_for={"vc-a": "team-a"})


def test_set_quota_command_round_trips_through_a_shell() -> None:
    move = kq.Move("team a", 16, ev("e1", "vc-a", 8, 16))
    words = shlex.split(kq.set_quota_command(move, flavor="a100"))
    assert words[:2] == [sys.executable, str(PATH)]
    assert words[2:] == ["--flavor", "a100", "--set-quota", "team a=16"]


def test_a_plan_is_released_only_when_balanced_and_scale_downs_come_first() -> None:
    plans = kq.PlanAssembler()
    assert plans.add(ev("e1", "vc-a", 8, 24)) == []
    assert plans.add(ev("e2", "vc-b", 16, 8)) == []  # +16 -8: not balanced yet
    assert plans.add(ev("e1", "vc-a", 8, 24)) == []  # duplicate: dropped, no double count
    done = plans.add(ev("e3", "vc-c", 8, 0))
    assert [e.event_id for e in done] == ["e1", "e2", "e3"]
    assert plans.duplicates == 1 and plans.pending_plans == 0
    moves = kq.plan_moves(done, queue_for={"vc-a": "team-a"}, known_queues={"vc-b", "vc-c"})
    assert [(m.queue, m.gpus) for m in moves] == [("vc-b", 8), ("vc-c", 0), ("team-a", 24)]


def test_a_tenant_without_cluster_queue_refuses_the_whole_plan() -> None:
    plan = [ev("e1", "vc-a", 8, 16), ev("e2", "vc-x", 16, 8), ev("e3", "vc-y", 8, 8)]
    with pytest.raises(kq.PlanRefused, match=r"plan p1 refused.*vc-x, vc-y"):
        kq.plan_moves(plan, queue_for={"vc-a": "team-a"}, known_queues={"vc-b"})


def test_two_tenants_of_one_cluster_queue_refuse_the_whole_plan() -> None:
    """vc-a mapped to team-a, and tenant team-a named like its queue: one queue, two
    targets; applying both would leave whichever came last."""
    plan = [ev("e1", "vc-a", 0, 24), ev("e2", "team-a", 16, 0), ev("e3", "vc-b", 16, 8)]
    with pytest.raises(kq.PlanRefused, match=r"tenants team-a, vc-a share ClusterQueue team-a"):
        kq.plan_moves(plan, queue_for={"vc-a": "team-a"}, known_queues={"team-a", "vc-b"})


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


# --- against a stand-in kubectl -------------------------------------------------------


def fake_cluster(tmp_path: Path, queues: dict[str, int]) -> tuple[Path, dict[str, str]]:
    """ClusterQueues ``name -> a100 GPUs`` behind a fake ``kubectl`` first on PATH."""
    state = tmp_path / "kube"
    state.mkdir()
    for name, gpus in queues.items():
        (state / f"{name}.json").write_text(json.dumps(cluster_queue(name, gpus)))
    (state / "calls.log").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "kubectl"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {FAKE_KUBECTL} "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "FAKE_KUBE_DIR": str(state)}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return state, env


def _calls(state: Path) -> list[str]:
    return (state / "calls.log").read_text().splitlines()


def _stored(state: Path, name: str) -> dict[str, Any]:
    return json.loads((state / f"{name}.json").read_text())


def test_set_quota_reads_then_patches_and_a_concurrent_change_fails(tmp_path: Path) -> None:
    state, env = fake_cluster(tmp_path, {"team-a": 16})
    cmd = [sys.executable, str(PATH), "--flavor", "a100", "--set-quota", "team-a=8"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert _calls(state) == ["get team-a", "patch team-a"]
    expected = _expected(cluster_queue("team-a", 16), "a100", nominalQuota=8, lendingLimit=8)
    expected["metadata"]["resourceVersion"] = "42"
    assert _stored(state, "team-a") == expected
    # someone changes the queue between our read and our write: refused, not overwritten
    race = {**env, "FAKE_KUBE_RACE": "1"}
    cmd[-1] = "team-a=4"
    res = subprocess.run(cmd, env=race, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 1
    assert "not changed" in res.stderr and "resourceVersion" in res.stderr
    assert _gpu(_stored(state, "team-a"), "a100")["nominalQuota"] == 8


PLANS = [
    ev("e1", "vc-a", 16, 24, size=3, seq=1),
    ev("e2", "vc-b", 16, 12, size=3, seq=1),
    ev("e2", "vc-b", 16, 12, size=3, seq=1),  # duplicate
    ev("e3", "vc-c", 16, 12, size=3, seq=1),
    ev("f1", "vc-a", 24, 20, plan="p2", size=2, seq=2),
    ev("f2", "vc-b", 12, 16, plan="p2", size=2, seq=2),
]


def _script(
    events: list[ScalingEvent], *args: str, extra: bytes = b""
) -> subprocess.CompletedProcess:
    stdin = b"\n".join(encode(e) for e in events) + b"\n" + extra
    cmd = [sys.executable, str(PATH), "--stdin", "--flavor", "a100", *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=60, check=False)


MAP = ("--queue-map", "vc-a=team-a", "--known-queues", "vc-b,vc-c")


def test_the_printed_script_applies_whole_plans_donors_first(tmp_path: Path) -> None:
    res = _script(PLANS, *MAP, extra=b"{garbage\n")
    assert res.returncode == 0, res.stderr
    out = res.stdout.decode()
    assert out.splitlines()[:2] == ["# plan p1: vc-b -4, vc-c -4, vc-a +8", "set -e"]
    err = res.stderr.decode()
    assert "invalid event" in err
    assert "2 plans printed, 1 duplicate dropped, 0 plans incomplete or expired" in err
    state, env = fake_cluster(tmp_path, {"team-a": 16, "vc-b": 16, "vc-c": 16})
    sh = subprocess.run(
        ["sh"], input=out, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert sh.returncode == 0, sh.stderr
    patched = [c.split()[1] for c in _calls(state) if c.startswith("patch")]
    assert patched == ["vc-b", "vc-c", "team-a", "team-a", "vc-b"]
    assert {q: _gpu(_stored(state, q), "a100")["nominalQuota"] for q in patched} == {
        "team-a": 20,
        "vc-b": 16,
        "vc-c": 12,
    }
    # the rest of each queue is as it was
    for q in ("team-a", "vc-b", "vc-c"):
        stored = _stored(state, q)
        assert _gpu(stored, "h100") == _gpu(cluster_queue(q), "h100")
        assert stored["spec"]["resourceGroups"][0] == cluster_queue(q)["spec"]["resourceGroups"][0]
        assert _gpu(stored, "a100")["borrowingLimit"] == "8"


def test_a_failing_change_stops_the_rest_of_the_script(tmp_path: Path) -> None:
    res = _script(PLANS, *MAP)
    assert res.returncode == 0, res.stderr
    state, env = fake_cluster(tmp_path, {"team-a": 16, "vc-b": 16, "vc-c": 16})
    env["FAKE_KUBE_FAIL"] = "vc-c"
    sh = subprocess.run(
        ["sh"],
        input=res.stdout.decode(),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert sh.returncode != 0
    # the first donor gave back, the second failed: the receiver was not raised, p2 not run
    assert _calls(state) == ["get vc-b", "patch vc-b", "get vc-c", "patch vc-c"]
    assert _gpu(_stored(state, "team-a"), "a100")["nominalQuota"] == "16"


def test_a_plan_naming_an_unmapped_tenant_is_refused_and_stops_the_consumer() -> None:
    events = [
        ev("e1", "vc-a", 8, 16, size=2, seq=1),
        ev("e2", "vc-x", 16, 8, size=2, seq=1),  # no ClusterQueue for vc-x
        ev("f1", "vc-a", 16, 12, plan="p2", size=2, seq=2),
        ev("f2", "vc-b", 8, 12, plan="p2", size=2, seq=2),
    ]
    res = _script(events, "--queue-map", "vc-a=team-a", "--known-queues", "vc-b")
    assert res.returncode == 1
    err = res.stderr.decode()
    assert "plan p1 refused" in err and "vc-x" in err
    out = res.stdout.decode()
    assert "--set-quota" not in out  # nothing of p1, nothing after it
    assert out.splitlines()[-1] == "exit 1"


def test_lines_that_are_not_json_objects_hint_at_events_json() -> None:
    """``dprobe events`` without --json prints text: each line is skipped, saying so."""
    res = subprocess.run(
        [sys.executable, str(PATH), "--stdin", "--known-queues", "vc-a"],
        input=b"2026-12-04 15:04:29 UTC plan 1 vc-a scale_up\n3\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    warnings = [line for line in res.stderr.decode().splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 2
    assert all("(no JSON object: is the input `dprobe events --json`?)" in w for w in warnings)


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf"])
def test_a_plan_timeout_that_is_no_positive_time_does_not_start(seconds: str) -> None:
    """0 or less would drop every plan as expired (and exit 0 having applied none)."""
    res = _script(PLANS, *MAP, f"--plan-timeout={seconds}")
    assert res.returncode == 2
    assert res.stdout == b""
    assert f"--plan-timeout must be a positive number of seconds, got {seconds}" in (
        res.stderr.decode()
    )
    ok = _script(PLANS, *MAP, "--plan-timeout", "0.5")
    assert ok.returncode == 0 and b"# plan p1" in ok.stdout


@pytest.mark.parametrize(
    ("kubectl", "said"), [("", "names no command"), ('kubectl "', "quotation")]
)
def test_a_kubectl_that_is_no_command_line_exits_2(kubectl: str, said: str) -> None:
    cmd = [sys.executable, str(PATH), "--kubectl", kubectl, "--set-quota", "team-a=8"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "--kubectl" in res.stderr and said in res.stderr


@pytest.mark.parametrize("group", ["", " "])
def test_a_group_that_names_none_does_not_start(group: str) -> None:
    """Kafka refuses an empty group id only once the consumer reads (a traceback)."""
    cmd = [sys.executable, str(PATH), "--known-queues", "vc-a", "--group", group, "--apply"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2
    assert "--group must name a consumer group" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_tenant_mapped_to_two_cluster_queues_does_not_start() -> None:
    """A move sets one ClusterQueue: the second entry silently replaced the first."""
    with pytest.raises(ValueError, match="tenant vc-a is mapped to ClusterQueues team-a, team-b"):
        kq.parse_queue_map("vc-a=team-a,vc-a=team-b")
    assert kq.parse_queue_map("vc-a=team-a,vc-a=team-a") == {"vc-a": "team-a"}
    res = _script([ev("e1", "vc-a", 8, 16)], "--queue-map", "vc-a=team-a,vc-a=team-b")
    assert res.returncode == 2 and res.stdout == b""
    assert b"tenant vc-a is mapped to ClusterQueues team-a, team-b" in res.stderr


def test_without_any_queue_mapping_it_does_not_start() -> None:
    res = _script([ev("e1", "vc-a", 8, 16)])
    assert res.returncode == 2
    assert b"--queue-map" in res.stderr


@pytest.mark.parametrize(
    ("flags", "shared"),
    [
        (
            ["--queue-map", "vc-a=team-a,vc-b=team-a"],
            "tenants vc-a, vc-b share ClusterQueue team-a",
        ),
        (["--queue-map", "vc-a=vc-c", "--known-queues", "vc-c"], "tenants vc-a, vc-c share"),
    ],
)
def test_two_tenants_mapped_to_one_cluster_queue_do_not_start(
    flags: list[str], shared: str
) -> None:
    """Checked before any plan: plans that each move one of the two tenants would set
    the queue to each one's quota in turn, and no single plan shows both."""
    cmd = [sys.executable, str(PATH), "--stdin", *flags]
    res = subprocess.run(cmd, input=b"", capture_output=True, timeout=60, check=False)
    assert res.returncode == 2
    assert shared in res.stderr.decode()


# --- Kafka mode, against a stand-in consumer ------------------------------------------


class _Partition(NamedTuple):
    """A topic partition as aiokafka gives it; written as its name alone."""

    topic: str
    partition: str

    def __str__(self) -> str:
        return self.partition


class FakeConsumer:
    """Returns one prepared batch per ``getmany``; records what happened, in order."""

    batches: list[list[ScalingEvent]] = []
    timeline: list[str] = []
    partition_of: dict[str, str] = {}  # event id -> partition, where not "tp"

    def __init__(self, *topics: str, **config: Any) -> None:
        self.pending = list(type(self).batches)
        self.offsets: dict[str, int] = {}

    async def start(self) -> None:
        pass

    async def topics(self) -> set[str]:
        return {"t"}

    def subscribe(self, topics: list[str]) -> None:
        assert topics == ["t"]

    def assignment(self) -> set[Any]:
        return set()  # the start a new group commits is tested on the real broker

    async def stop(self) -> None:
        self.timeline.append("stop")

    async def getmany(self, timeout_ms: int) -> dict[Any, list[Any]]:
        """The next batch; an event's partition is ``"tp"`` unless ``partition_of`` names
        another for its id; offsets count per partition."""
        if not self.pending:
            return {}
        out: dict[Any, list[Any]] = {}
        for e in self.pending.pop(0):
            tp = _Partition("t", type(self).partition_of.get(e.event_id, "tp"))
            self.offsets[tp] = self.offsets.get(tp, -1) + 1
            out.setdefault(tp, []).append(SimpleNamespace(value=encode(e), offset=self.offsets[tp]))
        return out

    async def commit(self, offsets: dict[Any, int]) -> None:
        self.timeline.append(
            "commit " + ", ".join(f"{tp}={n}" for tp, n in sorted(offsets.items()))
        )


@pytest.fixture
def fake_kafka(monkeypatch: pytest.MonkeyPatch) -> type[FakeConsumer]:
    import aiokafka.errors  # the real errors, which the consumer catches

    FakeConsumer.timeline = []
    FakeConsumer.partition_of = {}
    fake = SimpleNamespace(AIOKafkaConsumer=FakeConsumer, errors=aiokafka.errors)
    monkeypatch.setitem(sys.modules, "aiokafka", fake)
    return FakeConsumer


def _runner(apply: bool, monkeypatch: pytest.MonkeyPatch, fail: str = "", limit: int = 2) -> Any:
    def set_quota(queue: str, gpus: int, **_: Any) -> bool:
        if queue == fail:
            raise kq.ApplyError(f"clusterqueue {queue}: refused")
        FakeConsumer.timeline.append(f"set {queue}={gpus}")
        return True

    monkeypatch.setattr(kq, "set_quota", set_quota)
    return kq.PlanRunner(
        kq.PlanAssembler(),
        queue_for={"vc-a": "team-a"},
        known_queues={"vc-b", "vc-c"},
        flavor="a100",
        apply=apply,
        out=io.StringIO(),
        limit=limit,
    )


ARGS = argparse.Namespace(topic="t", bootstrap="b", group="g", from_beginning=True)
BATCHES = [
    [ev("e1", "vc-a", 16, 24, size=3, seq=1), ev("e2", "vc-b", 16, 12, size=3, seq=1)],
    [ev("e3", "vc-c", 16, 12, size=3, seq=1)],
    [ev("f1", "vc-a", 24, 20, plan="p2", size=2, seq=2)],
    [ev("f2", "vc-b", 12, 16, plan="p2", size=2, seq=2)],
]


async def test_kafka_mode_commits_only_after_a_plan_is_applied(
    fake_kafka: type[FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_kafka.batches = BATCHES
    runner = _runner(True, monkeypatch)
    await kq.consume(ARGS, runner)
    assert fake_kafka.timeline == [
        # nothing committed while p1 is half-received
        "set vc-b=12", "set vc-c=12", "set team-a=24", "commit tp=3",
        "set team-a=20", "set vc-b=16", "commit tp=5", "stop",
    ]  # fmt: skip


async def test_a_plan_split_over_partitions_and_fetches_commits_every_partition_it_read(
    fake_kafka: type[FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # p1's first event is on partition p0 in one fetch, the rest on p1 in the next: the
    # commit after p1 is applied covers p0 too (else p0 offset 0 comes back as half a plan)
    fake_kafka.batches = [BATCHES[0][:1], BATCHES[0][1:] + BATCHES[1]]
    fake_kafka.partition_of = {"e1": "p0", "e2": "p1", "e3": "p1"}
    runner = _runner(True, monkeypatch, limit=1)
    await kq.consume(ARGS, runner)
    assert fake_kafka.timeline == [
        "set vc-b=12", "set vc-c=12", "set team-a=24", "commit p0=1, p1=2", "stop",
    ]  # fmt: skip


async def test_max_plans_stops_inside_a_batch_and_commits_only_what_it_applied(
    fake_kafka: type[FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_kafka.batches = [[e for batch in BATCHES for e in batch]]  # both plans in one fetch
    runner = _runner(True, monkeypatch, limit=1)
    await kq.consume(ARGS, runner)
    assert runner.done == 1
    # p2's records are neither applied nor committed: the next run starts with them
    assert fake_kafka.timeline == [
        "set vc-b=12", "set vc-c=12", "set team-a=24", "commit tp=3", "stop",
    ]  # fmt: skip


async def test_max_plans_commits_nothing_when_a_plan_past_it_was_released(
    fake_kafka: type[FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # p2 arrives whole before p1's last event: that event releases both, one past the limit
    p1, p2 = BATCHES[0] + BATCHES[1], BATCHES[2] + BATCHES[3]
    fake_kafka.batches = [p1[:2] + p2 + p1[2:]]
    runner = _runner(True, monkeypatch, limit=1)
    await kq.consume(ARGS, runner)
    assert (runner.done, runner.held_back) == (1, 1)
    assert fake_kafka.timeline == ["set vc-b=12", "set vc-c=12", "set team-a=24", "stop"]


async def test_kafka_mode_commits_nothing_when_a_change_fails(
    fake_kafka: type[FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_kafka.batches = BATCHES
    runner = _runner(True, monkeypatch, fail="vc-c")
    with pytest.raises(kq.ApplyError):
        await kq.consume(ARGS, runner)
    assert fake_kafka.timeline == ["set vc-b=12", "stop"]


async def test_kafka_mode_without_apply_prints_and_commits_nothing(
    fake_kafka: type[FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_kafka.batches = BATCHES
    runner = _runner(False, monkeypatch)
    await kq.consume(ARGS, runner)
    assert runner.done == 2
    assert fake_kafka.timeline == ["stop"]


@pytest.mark.integration
def test_a_misspelt_topic_or_an_unreachable_kafka_is_one_line_and_exit_2(
    kafka_bootstrap: str,
) -> None:
    """A broker that creates topics on demand would make a misspelt topic, and the
    consumer would wait on it for ever; it says so instead, without creating it."""

    def consumer(*flags: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(PATH), "--known-queues", "vc-a", *flags]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

    misspelt = f"dprobe.scaling-evnts-{os.getpid()}"
    res = consumer("--bootstrap", kafka_bootstrap, "--topic", misspelt)
    assert res.returncode == 2, res.stderr
    assert f"ERROR topic {misspelt} does not exist: check --topic" in res.stderr
    assert "Traceback" not in res.stderr
    res = consumer("--bootstrap", kafka_bootstrap, "--topic", misspelt)  # still not made
    assert res.returncode == 2 and "does not exist" in res.stderr
    res = consumer("--bootstrap", "127.0.0.1:1")
    assert res.returncode == 2
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("ERROR")]
    assert len(errors) == 1, res.stderr  # not the client's own "Unable connect" line too
    assert errors[0].startswith("ERROR cannot reach Kafka at 127.0.0.1:1")
    assert "Traceback" not in res.stderr and "Unclosed" not in res.stderr
    for bad in ("127.0.0.1:notaport", "127.0.0.1:99999"):
        res = consumer("--bootstrap", bad)
        assert res.returncode == 2
        assert f"ERROR --bootstrap {bad}: not HOST:PORT" in res.stderr
        assert "Traceback" not in res.stderr and "Unclosed" not in res.stderr


def test_docstring_examples_run() -> None:
    result = doctest.testmod(kq)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.integration
async def test_kafka_mode_applies_whole_plans_and_commits_them(kafka, tmp_path: Path) -> None:
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
    queues = {"team-a": 8, "vc-b": 16, "vc-c": 4, "vc-d": 8, "vc-e": 4}
    state, env = fake_cluster(tmp_path, queues)

    def run(*extra: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(PATH), "--bootstrap", kafka.bootstrap, "--topic", topic,
               "--group", group, "--from-beginning", "--apply", "--flavor", "a100",
               "--queue-map", "vc-a=team-a", "--known-queues", "vc-b,vc-c,vc-d,vc-e",
               *extra]  # fmt: skip
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90, check=False)

    res = run("--max-plans", "2")
    assert res.returncode == 0, res.stderr
    assert _plans(res.stdout) == {
        "p1": {"vc-a +8", "vc-b -8"},
        "p2": {"vc-a -4", "vc-c +4"},
    }
    assert _gpu(_stored(state, "team-a"), "a100")["nominalQuota"] == 12
    # everything was applied and committed: a restart of the same group applies nothing old
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


def test_plans_released_together_run_one_after_another_in_plan_order() -> None:
    # plan 2 completes first and waits for plan 1: both go out with plan 1's last event,
    # and each runs as its own block (vc-a ends at plan 2's target)
    out = io.StringIO()
    runner = kq.PlanRunner(
        kq.PlanAssembler(), queue_for={}, known_queues={"vc-a", "vc-b", "vc-c"},
        flavor="a100", out=out,
    )  # fmt: skip
    p1 = [
        ev("a1", "vc-a", 8, 16, "p1", size=2, seq=1),
        ev("b1", "vc-b", 16, 8, "p1", size=2, seq=1),
    ]
    p2 = [
        ev("a2", "vc-a", 16, 8, "p2", size=2, seq=2),
        ev("c2", "vc-c", 8, 16, "p2", size=2, seq=2),
    ]
    for e in (p1[0], *p2, p1[1]):
        runner.feed(encode(e))
    plans = [line for line in out.getvalue().splitlines() if line.startswith("# plan")]
    assert plans == ["# plan p1: vc-b -8, vc-a +8", "# plan p2: vc-a -8, vc-c +8"]
    assert runner.done == 2


@pytest.mark.integration
async def test_kafka_mode_skips_a_tombstone_and_records_that_are_no_events(
    kafka, tmp_path: Path
) -> None:
    """A null value (a tombstone) or a text line produced onto the topic, e.g. with kcat,
    is skipped with a warning naming its partition and offset; the plans around it apply."""
    from aiokafka import AIOKafkaProducer

    topic = await kafka.create_topic("scaling-events")
    values = [
        encode(ev("e1", "vc-a", 8, 16)),
        None,
        b"not json",
        encode(ev("e2", "vc-b", 16, 8)),
    ]
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"k")
    state, env = fake_cluster(tmp_path, {"vc-a": 8, "vc-b": 16})
    cmd = [sys.executable, str(PATH), "--bootstrap", kafka.bootstrap, "--topic", topic,
           "--group", kafka.unique("g"), "--from-beginning", "--apply", "--flavor", "a100",
           "--known-queues", "vc-a,vc-b", "--max-plans", "1"]  # fmt: skip
    res = _run_blocking(cmd, env)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("WARNING")]
    assert len(warnings) == 2, res.stderr
    assert f"{topic}[0]@1" in warnings[0] and "tombstone" in warnings[0]
    assert f"{topic}[0]@2" in warnings[1] and "not valid JSON" in warnings[1]
    assert all("dprobe events --json" not in w for w in warnings)  # a hint for --stdin only
    # where it reads, said once; not the Kafka client's progress lines
    assert f"INFO reading {topic} (partition 0) as group " in res.stderr
    assert "Joined group" not in res.stderr and "Subscribed to" not in res.stderr
    assert _plans(res.stdout) == {"p1": {"vc-a +8", "vc-b -8"}}
    assert _gpu(_stored(state, "vc-b"), "a100")["nominalQuota"] == 8


def _run_blocking(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90, check=False)


@pytest.mark.integration
async def test_a_plan_that_failed_on_the_first_run_is_applied_by_the_next(
    kafka, tmp_path: Path
) -> None:
    """A group that has committed nothing yet starts at the newest record ("latest"):
    unless its start is committed, a plan that failed on the first run would be skipped
    by the next, which starts at the newest record again."""

    from aiokafka import AIOKafkaProducer

    topic = await kafka.create_topic("scaling-events")
    state, env = fake_cluster(tmp_path, {"vc-a": 16, "vc-b": 8})
    cmd = [sys.executable, str(PATH), "--bootstrap", kafka.bootstrap, "--topic", topic,
           "--group", kafka.unique("g"), "--apply", "--flavor", "a100",
           "--known-queues", "vc-a,vc-b", "--max-plans", "1"]  # fmt: skip
    first = await asyncio.create_subprocess_exec(
        *cmd, env={**env, "FAKE_KUBE_FAIL": "vc-a"}, stderr=asyncio.subprocess.PIPE
    )
    assert first.stderr is not None
    seen = b""
    while b"INFO reading" not in seen:  # the group has given it the partition
        line = await asyncio.wait_for(first.stderr.readline(), 60)
        assert line, "the consumer ended before it was assigned the topic"
        seen += line
    await asyncio.sleep(2)  # its start position ("latest") is resolved
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(topic, encode(ev("e1", "vc-a", 16, 8)))
        await producer.send_and_wait(topic, encode(ev("e2", "vc-b", 8, 16)))
    err = seen + await asyncio.wait_for(first.stderr.read(), 60)
    assert await first.wait() == 1, err.decode()
    assert b"clusterqueue vc-a" in err or b"vc-a" in err
    assert _gpu(_stored(state, "vc-b"), "a100")["nominalQuota"] == "8"  # nothing granted
    try:
        again = await asyncio.to_thread(_run_blocking, cmd, env)
    except subprocess.TimeoutExpired:
        pytest.fail("the next run did not apply the plan that failed: it waited for new ones")
    assert again.returncode == 0, again.stderr
    assert _plans(again.stdout) == {"p1": {"vc-a -8", "vc-b +8"}}
    assert _gpu(_stored(state, "vc-a"), "a100")["nominalQuota"] == 8
    assert _gpu(_stored(state, "vc-b"), "a100")["nominalQuota"] == 16


@pytest.mark.integration
@pytest.mark.timeout(180)
async def test_a_plan_slower_to_apply_than_the_group_session_is_still_committed(
    kafka, tmp_path: Path
) -> None:
    """kubectl calls that take longer in all than the group's session timeout (10 s) must
    not keep the consumer from its group: the plan is applied and committed, no traceback."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = await kafka.create_topic("scaling-events")
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(topic, encode(ev("e1", "vc-a", 16, 8)))
        await producer.send_and_wait(topic, encode(ev("e2", "vc-b", 8, 16)))
    state, env = fake_cluster(tmp_path, {"vc-a": 16, "vc-b": 8})
    group = kafka.unique("g")
    cmd = [sys.executable, str(PATH), "--bootstrap", kafka.bootstrap, "--topic", topic,
           "--group", group, "--from-beginning", "--apply", "--flavor", "a100",
           "--known-queues", "vc-a,vc-b", "--max-plans", "1"]  # fmt: skip
    # four calls (a get and a patch per move) of 3.5 s: 14 s
    res = await asyncio.to_thread(_run_blocking, cmd, {**env, "FAKE_KUBE_DELAY": "3.5"})
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert _gpu(_stored(state, "vc-b"), "a100")["nominalQuota"] == 16
    reader = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group)
    await reader.start()
    try:
        assert await reader.committed(TopicPartition(topic, 0)) == 2
    finally:
        await reader.stop()


@pytest.mark.integration
@pytest.mark.timeout(180)
async def test_a_partition_taken_by_another_member_while_applying_is_one_error_line(
    kafka, tmp_path: Path
) -> None:
    """A second consumer of the group (a rolling update) takes one of the two partitions
    while a plan is applied: its offsets cannot be committed. The consumer says so in one
    line and exits 1 (was an IllegalStateError traceback)."""
    from aiokafka import AIOKafkaProducer

    topic = await kafka.create_topic("scaling-events", partitions=2)
    state, env = fake_cluster(tmp_path, {"vc-a": 16, "vc-b": 8})
    env["FAKE_KUBE_DELAY"] = "3"  # four calls: 12 s to apply the plan
    cmd = [sys.executable, str(PATH), "--bootstrap", kafka.bootstrap, "--topic", topic,
           "--group", kafka.unique("g"), "--from-beginning", "--known-queues", "vc-a,vc-b",
           "--flavor", "a100"]  # fmt: skip
    first = await asyncio.create_subprocess_exec(
        *cmd, "--apply", "--max-plans", "1", env=env, stderr=asyncio.subprocess.PIPE
    )
    assert first.stderr is not None
    seen = b""
    while b"INFO reading" not in seen:
        line = await asyncio.wait_for(first.stderr.readline(), 60)
        assert line, "the consumer ended before it was assigned the topic"
        seen += line
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send_and_wait(topic, encode(ev("e1", "vc-a", 16, 8, size=2)), partition=0)
        await producer.send_and_wait(topic, encode(ev("e2", "vc-b", 8, 16, size=2)), partition=1)
    await asyncio.sleep(4)  # it is applying the plan
    second = await asyncio.create_subprocess_exec(
        *cmd, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        err = (seen + await asyncio.wait_for(first.stderr.read(), 90)).decode()
        assert await first.wait() == 1, err
    finally:
        second.terminate()
        await second.wait()
    assert "Traceback" not in err
    errors = [ln for ln in err.splitlines() if ln.startswith("ERROR")]
    assert len(errors) == 1, err
    assert "not committed" in errors[0] and "applies them again" in errors[0]
    assert _gpu(_stored(state, "vc-b"), "a100")["nominalQuota"] == 16  # the plan was applied


def test_a_plan_incomplete_at_the_end_of_the_input_no_longer_holds_back_later_plans() -> None:
    # p1 lost two of its three events (the input was cut); p2, made after it, is whole
    events = [PLANS[0], *PLANS[4:]]
    res = _script(events, *MAP)
    assert res.returncode == 0, res.stderr
    out, err = res.stdout.decode(), res.stderr.decode()
    assert out.splitlines()[:2] == ["# plan p2: vc-a -4, vc-b +4", "set -e"]
    assert "# plan p1" not in out
    assert "plan p1 incomplete (1 events) at the end of the input; not applied" in err
    assert "1 plan printed, 0 duplicates dropped, 1 plan incomplete or expired" in err


@pytest.mark.integration
async def test_a_failure_after_applied_plans_leaves_them_committed(kafka, tmp_path: Path) -> None:
    """Plans read in one fetch are committed one by one as they are applied: a failure in
    the third leaves the first two committed, and the next run applies only the third
    (not the older plans again, which would take the queues back through past quotas)."""
    from aiokafka import AIOKafkaProducer

    topic = await kafka.create_topic("scaling-events")
    plans = [
        ev("a1", "vc-a", 8, 16, "p1", size=2, seq=1), ev("b1", "vc-b", 16, 8, "p1", size=2, seq=1),
        ev("a2", "vc-a", 16, 12, "p2", size=2, seq=2), ev("b2", "vc-b", 8, 12, "p2", size=2, seq=2),
        ev("a3", "vc-a", 12, 8, "p3", size=2, seq=3), ev("c3", "vc-c", 4, 8, "p3", size=2, seq=3),
    ]  # fmt: skip
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for e in plans:
            await producer.send_and_wait(topic, encode(e), key=e.tenant.encode())
    state, env = fake_cluster(tmp_path, {"vc-a": 8, "vc-b": 16, "vc-c": 4})
    cmd = [sys.executable, str(PATH), "--bootstrap", kafka.bootstrap, "--topic", topic,
           "--group", kafka.unique("g"), "--from-beginning", "--apply", "--flavor", "a100",
           "--known-queues", "vc-a,vc-b,vc-c"]  # fmt: skip
    first = await asyncio.to_thread(_run_blocking, cmd, {**env, "FAKE_KUBE_FAIL": "vc-c"})
    assert first.returncode == 1, first.stderr
    assert list(_plans(first.stdout)) == ["p1", "p2", "p3"]
    again = await asyncio.to_thread(_run_blocking, [*cmd, "--max-plans", "1"], env)
    assert again.returncode == 0, again.stderr
    assert _plans(again.stdout) == {"p3": {"vc-a -4", "vc-c +4"}}
    quotas = {q: _gpu(_stored(state, q), "a100")["nominalQuota"] for q in ("vc-a", "vc-b", "vc-c")}
    assert quotas == {"vc-a": 8, "vc-b": 12, "vc-c": 8}


def _option_help(help_text: str) -> dict[str, str]:
    """``--option`` -> its help text, from argparse's ``options:`` section."""
    blocks = re.split(r"\n  (?=-)", help_text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0])
    out = {}
    for block in filter(None, (b.strip() for b in blocks)):
        names, _, text = block.partition("  ")  # two spaces end the names and metavars
        option = names.split(",")[-1].split()[0]
        out[option] = " ".join(text.split())
    return out


def test_help_says_what_each_option_does_its_default_and_the_exit_statuses() -> None:
    res = subprocess.run(
        [sys.executable, str(PATH), "--help"], capture_output=True, text=True, check=True
    )
    helps = _option_help(res.stdout)
    assert {o for o, text in helps.items() if not text} == set(), res.stdout
    defaults = {
        "--bootstrap": "127.0.0.1:9092", "--topic": "dprobe.scaling-events",
        "--group": "kueue-quota-consumer", "--flavor": "default-flavor", "--plan-timeout": "300",
    }  # fmt: skip
    for option, default in defaults.items():
        assert f"default {default}" in helps[option], (option, helps[option])
    out = " ".join(res.stdout.split())
    assert "python examples/kueue_quota_consumer.py --bootstrap" in out  # a usage example
    for status in ("0", "1", "2"):
        assert f"{status}:" in out, status


@pytest.mark.integration
async def test_a_consumer_that_applied_every_plan_leaves_its_group_no_lag(
    kafka, tmp_path: Path
) -> None:
    """The worker sends each plan in a transaction, whose commit marker takes an offset
    after the plan's last event: once every plan is applied, the group's committed offset
    is the end of the partition (lag 0), not the marker's offset (lag 1 for ever)."""
    import signal

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = await kafka.create_topic("scaling-events")
    group = kafka.unique("g")
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.bootstrap, transactional_id=kafka.unique("planner")
    )
    async with producer:
        for n, (donor, receiver) in enumerate([("vc-a", "vc-b"), ("vc-b", "vc-a")], start=1):
            async with producer.transaction():
                for e in (
                    ev(f"d{n}", donor, 16, 8, f"p{n}", size=2, seq=n),
                    ev(f"r{n}", receiver, 8, 16, f"p{n}", size=2, seq=n),
                ):
                    await producer.send(topic, encode(e), key=e.tenant.encode())
    state, env = fake_cluster(tmp_path, {"vc-a": 16, "vc-b": 8})
    cmd = [sys.executable, str(PATH), "--bootstrap", kafka.bootstrap, "--topic", topic,
           "--group", group, "--from-beginning", "--apply", "--flavor", "a100",
           "--known-queues", "vc-a,vc-b"]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(*cmd, env=env, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    plans = 0
    while plans < 2:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, "the consumer ended before it applied both plans"
        plans += line.startswith(b"# plan ")
    await asyncio.sleep(3)  # a few more polls
    proc.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert _gpu(_stored(state, "vc-a"), "a100")["nominalQuota"] == 16  # both plans applied
    tp = TopicPartition(topic, 0)
    reader = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group)
    async with reader:
        end = (await reader.end_offsets([tp]))[tp]
        assert end == 6  # 4 events and 2 commit markers
        assert await reader.committed(tp) == end
