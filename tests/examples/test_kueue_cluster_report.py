"""The Kueue adapter example: ClusterQueues -> one `dprobe cluster publish` line whose
report carries each tenant's GPU nominalQuota and their sum as the capacity; on the real
broker, the printed line run by a shell publishes exactly that."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from dprobe.cli import build_parser
from dprobe.commands.cluster import report_from

PATH = Path(__file__).resolve().parents[2] / "examples" / "kueue_cluster_report.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kueue_cluster_report", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


kr = _load()


def _cq(name: str, cohort: str, flavors: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "cohort": cohort,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": fl,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "nvidia.com/gpu", "nominalQuota": q},
                            ],
                        }
                        for fl, q in flavors.items()
                    ],
                }
            ],
        },
    }


QUEUES = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        _cq("team-a", "gpu-pool", {"a100": 16, "h100": "8"}),
        _cq("team-b", "gpu-pool", {"a100": "32"}),
        _cq("team-c", "gpu-pool", {"a100": "1.5"}),  # not whole GPUs: skipped
        _cq("other", "cpu-pool", {"a100": 4}),
    ],
}


READABLE = {**QUEUES, "items": [q for q in QUEUES["items"] if q["metadata"]["name"] != "team-c"]}


def _reference(flavor: str | None) -> dict[str, int]:
    """What the fixture holds, summed by hand."""
    return {"vc-a": 16 + (8 if flavor is None else 0), "team-b": 32}


@pytest.mark.parametrize("flavor", [None, "a100"])
def test_the_printed_line_reports_each_queue_and_their_sum(flavor: str | None) -> None:
    quotas = kr.queue_quotas(QUEUES, tenant_of={"team-a": "vc-a"}, cohort="gpu-pool", flavor=flavor)
    assert quotas == _reference(flavor)
    argv = shlex.split(kr.publish_line(quotas))
    assert argv[:3] == ["dprobe", "cluster", "publish"]
    report = report_from(build_parser().parse_args(argv[1:]), now=0.0)
    assert report.quotas == {t: float(q) for t, q in _reference(flavor).items()}
    assert report.capacity_gpus == sum(_reference(flavor).values())
    assert report.complete and report.source == "kueue"


@pytest.mark.parametrize(
    ("quantity", "gpus"),
    [
        (16, 16), ("8", 8), ("+4", 4), ("0", 0), ("1k", 1000), ("0.5k", 500), ("1M", 10**6),
        ("2Ki", 2048), ("1Mi", 2**20), ("2000m", 2), ("1e3", 1000), ("1E2", 100),
        ("120e-1", 12), ("16.0", 16), ("1.", 1), (" 8 ", 8),
    ],
)  # fmt: skip
def test_gpu_quantities_in_every_kubernetes_form(quantity: object, gpus: int) -> None:
    assert kr.gpus_of(quantity) == gpus


@pytest.mark.parametrize(
    "quantity", ["1.5", "500m", "-1", "1e-1", "abc", "", "1e", "1Kb", "1 k", True, None, "inf"]
)
def test_what_is_not_a_whole_number_of_gpus_is_refused(quantity: object) -> None:
    with pytest.raises(ValueError, match=r"whole number|not a quantity"):
        kr.gpus_of(quantity)


def test_the_cohort_is_read_from_cohort_name_too() -> None:
    v1beta2 = _cq("team-d", "gpu-pool", {"a100": "1k"})
    v1beta2["spec"]["cohortName"] = v1beta2["spec"].pop("cohort")
    queues = {"items": [*QUEUES["items"], v1beta2]}
    quotas = kr.queue_quotas(queues, tenant_of={}, cohort="gpu-pool", flavor="a100")
    assert quotas == {"team-a": 16, "team-b": 32, "team-d": 1000}


def _report(queues: object, *flags: str) -> subprocess.CompletedProcess[str]:
    """The script run on ``queues`` (as JSON on stdin) with ``flags``."""
    return subprocess.run(
        [sys.executable, str(PATH), *flags],
        input=json.dumps(queues),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_queue_it_cannot_read_stops_the_complete_report() -> None:
    skipped: list[str] = []
    kr.queue_quotas(QUEUES, tenant_of={}, cohort="gpu-pool", skipped=skipped)
    assert skipped == ["team-c"]
    res = _report(QUEUES, "--cohort", "gpu-pool")
    assert res.returncode == 1
    assert res.stdout == ""  # no report: the planner would take team-c's tenant for 0
    assert "team-c" in res.stderr
    ok = _report(READABLE, "--cohort", "gpu-pool")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("dprobe cluster publish --source kueue --complete --capacity 56 ")


def test_a_flavor_with_no_gpu_quota_is_refused_not_reported_as_zero() -> None:
    """A misspelt --flavor would report every tenant as holding 0 (complete), and the
    planner would stop scaling: it exits 2 naming the flavors that do give GPUs."""
    res = _report(READABLE, "--cohort", "gpu-pool", "--flavor", "h200")
    assert res.returncode == 2 and res.stdout == ""
    assert "no ClusterQueue gives GPU quota in flavor 'h200'" in res.stderr
    assert "(flavors with GPU quota: a100, h100); check --flavor" in res.stderr
    zero = {"items": [_cq("team-a", "gpu-pool", {"a100": 0}), _cq("team-b", "gpu-pool", {})]}
    res = _report(zero, "--cohort", "gpu-pool", "--flavor", "a100")
    assert res.returncode == 2 and res.stdout == ""
    assert "every ClusterQueue found holds 0 GPUs" in res.stderr
    ok = _report(READABLE, "--cohort", "gpu-pool", "--flavor", "h100")  # team-a's 8
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == shlex.split(
        kr.publish_line({"team-a": 8, "team-b": 0}, source="kueue")
    )


def test_docstring_examples() -> None:
    assert doctest.testmod(kr).failed == 0


@pytest.mark.integration
def test_piped_to_a_shell_it_publishes_the_report(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = f"kueue{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "DPROBE_KAFKA_BOOTSTRAP": kafka_bootstrap}
    env["DPROBE_KAFKA_TOPIC_PREFIX"] = prefix
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    line = subprocess.run(
        [sys.executable, str(PATH), "--cohort", "gpu-pool", "--queue-map", "vc-a=team-a"],
        input=json.dumps(READABLE),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    subprocess.run(["sh", "-c", line], env=env, check=True, timeout=60, capture_output=True)
    shown = subprocess.run(
        [sys.executable, "-m", "dprobe.cli", "cluster", "show", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    (report,) = json.loads(shown)
    assert report["quotas"] == {"vc-a": 24.0, "team-b": 32.0}
    assert report["capacity_gpus"] == 56.0 and report["source"] == "kueue"


ONE_QUEUE = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", **READABLE["items"][0]}


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ([], "a JSON array"),
        ({"items": {"team-a": 1}}, "no list of items"),
        (ONE_QUEUE, "one ClusterQueue (team-a), not the list"),
        ({"items": [READABLE["items"][0], 1]}, "items[1] is not an object"),
        ({"items": [{"metadata": None}]}, "items[0].metadata is not an object"),
        ({"items": [{"metadata": {"name": "a"}, "spec": None}]}, "items[0].spec is not an"),
        (
            {"items": [{"metadata": {"name": "a"}, "spec": {"resourceGroups": [{"flavors": 3}]}}]},
            "items[0].spec.resourceGroups[0].flavors is not a list",
        ),
    ],
)
def test_input_that_is_no_cluster_queue_list_exits_2_saying_what_it_got(
    document: object, said: str
) -> None:
    res = _report(document)
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr
    assert said in res.stderr
    assert "kubectl get clusterqueues -o json" in res.stderr


def test_a_queue_mapped_to_two_tenants_exits_2() -> None:
    """The map is TENANT=CLUSTERQUEUE; a queue named twice would count for one tenant only."""
    res = _report(READABLE, "--queue-map", "vc-a=team-a,vc-b=team-a")
    assert res.returncode == 2 and res.stdout == ""
    assert "ClusterQueue team-a is mapped to tenants vc-a, vc-b" in res.stderr


def test_help_shows_the_pipeline_its_defaults_and_the_exit_statuses() -> None:
    res = subprocess.run(
        [sys.executable, str(PATH), "--help"], capture_output=True, text=True, check=True
    )
    out = " ".join(res.stdout.split())
    assert "kubectl get clusterqueues -o json |" in out and "| sh" in out
    assert "default kueue" in out  # --source
    for status in ("0", "1", "2"):
        assert f"{status}:" in out, status


def test_a_queue_map_naming_a_queue_not_in_the_list_exits_2() -> None:
    """A misspelt queue in the map would report the real queue under its own name and,
    the report being complete, the mapped tenant as holding 0."""
    res = _report(READABLE, "--cohort", "gpu-pool", "--queue-map", "vc-a=team-a,vc-b=team-bb")
    assert res.returncode == 2 and res.stdout == "", res.stdout
    assert "team-bb" in res.stderr and "vc-b" in res.stderr and "not in the list" in res.stderr
    ok = _report(READABLE, "--cohort", "gpu-pool", "--queue-map", "vc-a=team-a,vc-b=team-b")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == shlex.split(
        kr.publish_line({"vc-a": 24, "vc-b": 32})
    )  # 16 + 8 over its two flavors
