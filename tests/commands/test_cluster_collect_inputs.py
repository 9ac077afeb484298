"""Bad input to ``dprobe cluster`` and ``dprobe collect`` exits 2 with one line naming the
flag and the value given, before Kafka, a spool or an output file is touched; ``cluster
show`` names each invalid record it skips."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dprobe.cli import main
from dprobe.commands.cluster import report_from
from dprobe.config import CollectorSettings
from dprobe.errors import UsageError
from dprobe.schema import ClusterReport, encode

NOWHERE = ["--bootstrap", "127.0.0.1:1"]  # nothing listens: a test that gets there fails


def _args(**kw: object) -> argparse.Namespace:
    base = {"capacity": None, "quota": [], "quotas_csv": None, "complete": False, "source": "cli"}
    return argparse.Namespace(**{**base, **kw})


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --- cluster publish ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--capacity", "64", "--quota", "a=4", "--quota", "a=5"],
            "dprobe cluster: --quota 'a=5': tenant 'a' is given twice (also --quota 'a=4')",
        ),
        (
            ["--quota", "vc-a=4", "--quota", "vc-b=1", "--quota", "vc-a=4"],
            "dprobe cluster: --quota 'vc-a=4': tenant 'vc-a' is given twice",
        ),
        (
            ["--quota", "a=1", "--source", ""],
            "dprobe cluster: --source '': a source name must be 1 to 256 characters, not 0",
        ),
        (
            ["--quota", "a=1", "--source", "s" * 3000],
            "dprobe cluster: --source 'ssssssssssssssssssssssssssssssssssssssss'... "
            "(3000 characters): a source name must be 1 to 256 characters, not 3000",
        ),
        (
            ["--quota", "t" * 3000 + "=1"],
            "dprobe cluster: --quota 'tttttttttttttttttttttttttttttttttttttttt'... "
            "(3002 characters): a tenant name must be 1 to 256 characters, not 3000",
        ),
        (["--quota", "x" * 257 + "=8"], "a tenant name must be 1 to 256 characters, not 257"),
        (["--quota", "\udcff=1"], "dprobe cluster: --quota '\\udcff=1': a tenant name must be"),
        (["--quota", "a=1", "--source", "\udcff"], "--source '\\udcff': a source name must be"),
        (["--quota", "vc\x1b[2Ja=1"], "a tenant name 'vc\\x1b[2Ja' holds a control character"),
        (["--quota", "a=1", "--source", "kueue\n"], "a source name 'kueue\\n' holds a control"),
        (["--capacity", "inf"], "dprobe cluster: --capacity inf: GPUs must be within [0, 1e7]"),
        (["--quota", "a=lots"], "dprobe cluster: --quota 'a=lots': not a number of GPUs"),
    ],
)
def test_a_bad_or_repeated_quota_or_source_exits_2_naming_the_flag_and_value(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code = main([*NOWHERE, "cluster", "publish", *argv])
    line = _one_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(expected) or expected in line, line
    assert len(line) < 300  # a long value is cut short


def test_names_the_schema_accepts_are_still_accepted() -> None:
    long = "t" * 256
    r = report_from(_args(quota=["a,b=1", "a b=2", f"{long}=3", "x=y=4"], source="a b"), 5.0)
    assert r.source == "a b"
    assert r.quotas == {"a,b": 1.0, "a b": 2.0, long: 3.0, "x=y": 4.0}


def test_a_tenant_with_a_control_character_in_a_quotas_file_names_the_line(
    tmp_path: Path,
) -> None:
    csv = tmp_path / "q.csv"
    csv.write_text("tenant,quota_gpus\nvc-a,16\nvc\tb,8\n")
    with pytest.raises(UsageError, match=r"q\.csv: line 3: tenant 'vc\\tb' holds a control"):
        report_from(_args(quotas_csv=csv), 5.0)


def test_a_quota_flag_still_replaces_the_files_quota_of_its_tenant(tmp_path: Path) -> None:
    csv = tmp_path / "q.csv"
    csv.write_text("tenant,quota_gpus\nvc-a,16\n")
    r = report_from(_args(quota=["vc-a=8"], quotas_csv=csv), 5.0)
    assert r.quotas == {"vc-a": 8.0}


def test_quotas_above_the_capacity_are_a_valid_report() -> None:
    # docs/worker.md: the planner lends what reported quotas leave of the capacity (none
    # when they exceed it); an overcommitted scheduler reports such quotas
    r = report_from(_args(capacity=10.0, quota=["a=100"]), 5.0)
    assert (r.capacity_gpus, r.quotas) == (10.0, {"a": 100.0})


def test_a_repeated_quota_is_refused_in_report_from() -> None:
    with pytest.raises(UsageError, match="tenant 'a' is given twice"):
        report_from(_args(quota=["a=4", "a=4"]), 5.0)


# --- collect --tenant-map -----------------------------------------------------------------


def _bad_maps(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    invalid = tmp_path / "bad.toml"
    invalid.write_text("bad = [\n")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('[nodes]\nx = "vc-a"\n')
    folder = tmp_path / "folder"
    folder.mkdir()
    missing = tmp_path / "missing.toml"
    return {
        "missing": (missing, f"dprobe collect: tenant map {missing}: no such file"),
        "folder": (folder, f"dprobe collect: tenant map {folder}: cannot read"),
        "invalid": (invalid, f"dprobe collect: tenant map {invalid}: Invalid value"),
        "unknown": (unknown, f"dprobe collect: tenant map {unknown}: unknown tables"),
    }


@pytest.mark.parametrize("kind", ["missing", "folder", "invalid", "unknown"])
@pytest.mark.parametrize(
    "mode", [["--once"], ["--output", "OUT", "--max-ticks", "1"], ["--no-send", "--max-ticks", "1"]]
)
def test_a_bad_tenant_map_exits_2_with_the_synthetic_backend_as_with_nvml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, mode: list[str]
) -> None:
    path, expected = _bad_maps(tmp_path)[kind]
    out = tmp_path / "out.jsonl"
    mode = [str(out) if a == "OUT" else a for a in mode]
    dirs = ["--spool-dir", str(tmp_path / "spool"), "--state-dir", str(tmp_path / "state")]
    lines = {}
    for backend in ("synthetic", "nvml"):
        argv = ["collect", "--backend", backend, "--tenant-map", str(path), *dirs, *mode]
        code = main([*NOWHERE, *argv])
        captured = capsys.readouterr()
        assert code == 2, (backend, captured)
        assert captured.out == ""
        lines[backend] = _one_line(captured.err)
        assert lines[backend].startswith(expected), lines[backend]
    assert lines["synthetic"] == lines["nvml"]
    assert not out.exists()  # bad input touches no output file
    assert not (tmp_path / "spool").exists()


def test_a_good_tenant_map_is_accepted_by_the_synthetic_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "map.toml"
    good.write_text('[namespaces]\nteam-a = "vc-a"\n')
    code = main(
        [*NOWHERE, "collect", "--backend", "synthetic", "--tenant-map", str(good), "--once"]
    )
    assert code == 0
    assert '"host"' in capsys.readouterr().out


def test_make_resolver_checks_the_tenant_map_whatever_the_backend(tmp_path: Path) -> None:
    from dprobe.collectors.assemble import make_resolver

    missing = tmp_path / "missing.toml"
    for backend in ("synthetic", "nvml"):
        with pytest.raises(UsageError, match=r"missing\.toml: no such file"):
            make_resolver(CollectorSettings(backend=backend, tenant_map=missing))


def test_the_tenant_map_help_says_the_synthetic_backend_does_not_use_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["collect", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "synthetic backend names its own tenants: it checks a map given but does not use it" in (
        text
    )


# --- collect: synthetic workload bounds ---------------------------------------------------


def _collect(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A separate process with a deadline: too large a workload used to hang (SIGTERM too)."""
    environ = {**os.environ, **(env or {})}
    environ.pop("DPROBE_CONFIG", None)
    cmd = [sys.executable, "-m", "dprobe.cli", *NOWHERE, "collect", "--backend", "synthetic"]
    return subprocess.run(
        [*cmd, *argv], capture_output=True, text=True, env=environ, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--gpus", "100000"],
            "collector.synthetic_gpus must be at most 1,024 (given: --gpus 100000)",
        ),
        (["--gpus", "99999999"], "collector.synthetic_gpus must be at most 1,024 (given: --gpus "),
        (["--tenants", "100000000"], "collector.tenants must be at most 10,000 (given: --tenants "),
        (
            ["--procs-per-gpu", "65"],
            "collector.synthetic_procs_per_gpu must be at most 64 (given: --procs-per-gpu 65)",
        ),
    ],
)
def test_too_large_a_synthetic_workload_exits_2_naming_the_flag(
    tmp_path: Path, argv: list[str], expected: str
) -> None:
    out = tmp_path / "out.jsonl"
    res = _collect("--output", str(out), "--max-ticks", "1", *argv)
    assert res.returncode == 2, res.stderr
    assert _one_line(res.stderr).startswith(f"dprobe collect: {expected}")
    assert not out.exists()


def test_the_bounds_name_the_environment_variable_or_config_file(tmp_path: Path) -> None:
    res = _collect("--once", env={"DPROBE_COLLECTOR_SYNTHETIC_GPUS": "2000"})
    assert res.returncode == 2
    assert "(given: DPROBE_COLLECTOR_SYNTHETIC_GPUS='2000' in the environment)" in _one_line(
        res.stderr
    )
    config = tmp_path / "c.toml"
    config.write_text("[collector]\ntenants = 20000\n")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "dprobe.cli",
            *NOWHERE,
            "--config",
            str(config),
            "collect",
            "--once",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "DPROBE_CONFIG"},
    )
    assert res.returncode == 2
    given = f"(given: tenants = 20000 in [collector] of config file {config}, line "
    assert given in _one_line(res.stderr)


def test_the_largest_synthetic_workload_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl"
    argv = ["--gpus", "1024", "--procs-per-gpu", "64", "--tenants", "10000"]
    code = main(
        [
            *NOWHERE,
            "collect",
            "--backend",
            "synthetic",
            "--output",
            str(out),
            "--max-ticks",
            "1",
            *argv,
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert len(out.read_bytes().splitlines()) == 1


# --- cluster show on a topic with garbage (real broker) -------------------------------------


async def _cluster_topic_with(kafka, values: list[bytes]) -> tuple[str, str]:
    """A fresh ``<prefix>cluster`` topic (one partition) holding ``values``."""
    from aiokafka import AIOKafkaProducer

    prefix = kafka.unique("cl") + "."
    topic = await kafka.create_named(f"{prefix}cluster")
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"k")
    return prefix, topic


def _show(bootstrap: str, prefix: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DPROBE_KAFKA_TOPIC_PREFIX": prefix}
    env.pop("DPROBE_CONFIG", None)
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", bootstrap, "cluster", "show"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


@pytest.mark.integration
async def test_cluster_show_warns_about_each_invalid_record_and_prints_the_valid(kafka) -> None:
    good = ClusterReport(ts=1.7e9, source="kueue", capacity_gpus=64.0, quotas={"vc-a": 16.0})
    bad = [b"{not json", encode(good), b'{"v":1,"ts":5,"source":""}']
    prefix, topic = await _cluster_topic_with(kafka, bad)
    res = _show(kafka.bootstrap, prefix)
    assert res.returncode == 0, res.stderr
    assert "source kueue: capacity 64 GPUs; quotas vc-a=16" in res.stdout
    warnings = [line for line in res.stderr.splitlines() if line.startswith("dprobe cluster:")]
    assert len(warnings) == 2, res.stderr
    assert warnings == res.stderr.splitlines()  # nothing of the client's progress reports
    assert warnings[0].startswith(f"dprobe cluster: skipping {topic}[0]@0: not valid JSON")
    assert warnings[1].startswith(f"dprobe cluster: skipping {topic}[0]@2: ")
    assert "(at $.source)" in warnings[1]


@pytest.mark.integration
async def test_cluster_show_of_garbage_only_says_how_many_were_skipped(kafka) -> None:
    prefix, topic = await _cluster_topic_with(kafka, [b"garbage"])
    res = _show(kafka.bootstrap, prefix)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert f"dprobe cluster: skipping {topic}[0]@0: not valid JSON" in res.stderr
    assert f"no valid report on {topic} yet (1 invalid record skipped)" in res.stderr
