"""``dprobe cluster publish``: what the arguments describe is one valid ClusterReport;
bad input exits 2 with a one-line reason (a CSV's line number), before Kafka is touched."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dprobe.cli import main
from dprobe.commands.cluster import report_from


def _args(**kw: object) -> argparse.Namespace:
    base = {"capacity": None, "quota": [], "quotas_csv": None, "complete": False, "source": "cli"}
    return argparse.Namespace(**{**base, **kw})


def test_flags_and_csv_make_one_report_and_flags_win(tmp_path: Path) -> None:
    csv = tmp_path / "q.csv"
    csv.write_text("tenant,quota_gpus\nvc-a,16\nvc-b,32\n")
    r = report_from(_args(capacity=64.0, quota=["vc-b=24"], quotas_csv=csv, complete=True), 5.0)
    assert (r.ts, r.capacity_gpus, r.quotas, r.complete) == (
        5.0,
        64.0,
        {"vc-a": 16.0, "vc-b": 24.0},
        True,
    )


def _publish_quotas_file(
    csv: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """``cluster publish --quotas-csv`` of ``text`` written to ``csv``: exit code, stderr
    (the broker address is never reached: the file is refused first)."""
    csv.write_text(text)
    code = main(["--bootstrap", "127.0.0.1:1", "cluster", "publish", "--quotas-csv", str(csv)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tenant,quota_gpus\nvc-a,16\nvc-b,lots\n", "q.csv: line 3: not a number of GPUs"),
        ("tenant,quota_gpus\n,16\n", "q.csv: line 2: empty tenant"),
        ("tenant,gpus\nvc-a,16\n", "q.csv: line 1: expected the header tenant,quota_gpus"),
        ("tenant,quota_gpus\nvc-a,-8\n", "q.csv: line 2: GPUs must be within [0, 1e7]"),
        ("tenant,quota_gpus\na,5\nb,3\na,9\n", "q.csv: line 4: tenant 'a' is listed twice"),
        ("tenant,quota_gpus\na,5,7\n", "q.csv: line 2: 3 fields, the header has 2"),
        ("tenant,quota_gpus\na\n", "q.csv: line 2: 1 field, the header has 2"),
        (
            "tenant,tenant,quota_gpus\na,b,8\n",
            "q.csv: line 1: header names column tenant twice (fields 1 and 2)",
        ),
        ("tenant,quota_gpus\n" + "a" * 257 + ",5\n", "q.csv: line 2: tenant is 257 characters"),
        (
            "tenant,quota_gpus\nb,1\n" + "a" * (200 << 10) + ",5\n",
            "q.csv: line 3: not valid CSV (field larger than field limit",
        ),
    ],
)
def test_a_bad_quotas_file_exits_2_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    csv = tmp_path / "q.csv"
    code, err = _publish_quotas_file(csv, text, capsys)
    assert code == 2
    assert expected in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "nothing to publish"),
        (["--quota", "vc-a"], "expected TENANT=GPUS"),
        (["--quota", "vc-a=nan"], "GPUs must be within"),
        (["--capacity", "inf"], "GPUs must be within"),
        (["--quota", "x" * 300 + "=8"], "a tenant name must be 1 to 256 characters, not 300"),
    ],
)
def test_bad_flags_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code = main(["--bootstrap", "127.0.0.1:1", "cluster", "publish", *argv])
    assert code == 2
    assert expected in capsys.readouterr().err


def test_a_quotas_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    csv = tmp_path / "q.csv"
    csv.write_bytes(b"\xef\xbb\xbftenant,quota_gpus\r\nvc-a,16\r\n\r\nvc-b,8\r\n")
    assert report_from(_args(quotas_csv=csv), 5.0).quotas == {"vc-a": 16.0, "vc-b": 8.0}


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--capacity", "0"], "--capacity"),
        (["--quota", "vc-a=8", "--complete"], "--quota, --complete"),
        (["--quotas-csv", "q.csv"], "--quotas-csv"),
        # show prints every source's report: a source named would be ignored
        (["--source", "kueue"], "--source"),
    ],
)
def test_show_refuses_what_only_publish_uses(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    assert main(["--bootstrap", "127.0.0.1:1", "cluster", "show", *argv]) == 2
    err = capsys.readouterr().err
    assert err == f"dprobe cluster: {named}: only for cluster publish (show reads reports)\n"


def test_complete_without_a_quota_warns_that_every_quota_is_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # nothing listens at port 1: the warning comes before the publish fails
    assert main(["--bootstrap", "127.0.0.1:1", "cluster", "publish", "--complete"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("warning: --complete without a quota: this report gives every tenant")
    assert main(["--bootstrap", "127.0.0.1:1", "cluster", "publish", "--capacity", "8"]) == 2
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("text", ["tenant,quota_gpus\n", "tenant,quota_gpus\n\n", ""])
def test_a_quotas_file_without_tenants_is_named_in_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """The file was given: the error names it, instead of asking for --quotas-csv."""
    csv = tmp_path / "q.csv"
    code, err = _publish_quotas_file(csv, text, capsys)
    assert code == 2
    if text:
        assert err == (
            f"dprobe cluster: nothing to publish: {csv} lists no tenant, and no --capacity or "
            "--quota is given\n"
        )
    else:  # not even a header
        assert err == f"dprobe cluster: {csv}: line 1: expected the header tenant,quota_gpus\n"


@pytest.mark.parametrize("node", [8, 4])
def test_gpus_that_are_not_whole_nodes_are_warned_of_with_what_the_planner_reads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, node: int
) -> None:
    from dprobe.models.forecast.baselines import LastValue
    from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
    from dprobe.models.planner import PlannerSettings

    monkeypatch.setenv("DPROBE_WORKER_NODE_GPUS", str(node))
    argv = ["--capacity", "36", "--quota", "vc-a=12", "--quota", "vc-b=16"]
    # nothing listens at port 1: the warnings come before the publish fails
    assert main(["--bootstrap", "127.0.0.1:1", "cluster", "publish", *argv]) == 2
    warned = [x for x in capsys.readouterr().err.splitlines() if x.startswith("warning: ")]
    # the reference: what a worker's plan loop holds once it has read this report
    loop = PlanLoop(LastValue(), PlanLoopSettings(planner=PlannerSettings(node_gpus=node)))
    loop.on_cluster(report_from(_args(capacity=36.0, quota=argv[3::2])))
    expected = []
    if loop.capacity_gpus != 36:
        expected.append(f"--capacity 36 is not whole nodes of {node} GPUs (worker.node_gpus): "
                        f"the planner reads {loop.capacity_gpus}")  # fmt: skip
    for tenant, gpus in (("vc-a", 12), ("vc-b", 16)):
        read = loop.quotas()[tenant]
        if read != gpus:
            expected.append(f"{tenant}={gpus} is not whole nodes of {node} GPUs "
                            f"(worker.node_gpus): the planner reads {read}")  # fmt: skip
    assert warned == [f"warning: {line}" for line in expected]
    assert len(warned) == (2 if node == 8 else 0)
