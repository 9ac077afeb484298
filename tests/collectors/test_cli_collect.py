"""``dprobe collect``: --once output, no-driver exit, SIGTERM flushes/spools and exits 0."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dprobe.cli import main
from dprobe.clock import ManualClock
from dprobe.collectors.fake_nvml import FakeGpu, FakeNvml
from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.nvml import NvmlBackend
from dprobe.collectors.seq import SeqCounter
from dprobe.collectors.service import Collector
from dprobe.collectors.spool import Spool
from dprobe.collectors.tenants import TenantResolver
from dprobe.schema import decode_snapshot
from tests.nvidia_driver import has_nvidia_driver


def test_once_prints_one_valid_snapshot(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    code = main(["collect", "--backend", "synthetic", "--gpus", "3", "--host-id", "n1", "--once"])
    out = capsys.readouterr().out
    assert code == 0
    snap = decode_snapshot(out.encode())
    assert (snap.host, len(snap.gpus)) == ("n1", 3)
    assert not (tmp_path / "dprobe").exists()  # --once touches neither spool nor seq


def test_nvml_without_a_driver_is_one_clear_line_and_exit_2(capsys, tmp_path, monkeypatch) -> None:
    if has_nvidia_driver():
        pytest.skip("this machine has an NVIDIA driver")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    code = main(["collect", "--backend", "nvml", "--metrics-port", "0", "--no-send"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "nvml backend unavailable" in err[0] and "driver" in err[0]


def test_bad_settings_exit_2(capsys) -> None:
    assert main(["collect", "--interval", "0", "--once"]) == 2
    assert "interval_s" in capsys.readouterr().err
    # a typo of a few zeros would keep a core busy: refused too, with the floor it missed
    assert main(["collect", "--interval", "0.001", "--once"]) == 2
    assert "collector.interval_s must be at least 0.01 s" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gpus", "-3"], "collector.synthetic_gpus must be >= 1 (given: --gpus -3)"),
        (
            ["--procs-per-gpu", "0"],
            "collector.synthetic_procs_per_gpu must be >= 1 (given: --procs-per-gpu 0)",
        ),
        (["--tenants", "0"], "collector.tenants must be >= 1 (given: --tenants 0)"),
        (
            ["--metrics-port", "70000"],
            "collector.metrics_port must be within [0, 65535] (given: --metrics-port 70000)",
        ),
        (
            ["--metrics-port", "-1"],
            "collector.metrics_port must be within [0, 65535] (given: --metrics-port -1)",
        ),
    ],
)
def test_bad_synthetic_and_port_settings_exit_2_naming_the_setting(
    flags: list[str], message: str, capsys, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["collect", "--backend", "synthetic", *flags, "--once"]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [f"dprobe collect: {message}"]
    assert out == ""


@pytest.mark.parametrize(
    "host",
    # the seq file seq-<host> is a file name too: at most 255 bytes, so the host id 251
    ["../escape", "..", ".", "a/b", "a\\b", "nul\0byte", "h" * 257, "h" * 252, "\u00e9" * 200],
)
def test_a_host_id_that_is_no_single_folder_name_exits_2(
    host: str, capsys, tmp_path, monkeypatch
) -> None:
    # the spool is spool_dir/<host>: '../escape' would write it outside spool_dir
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spool = tmp_path / "spool"
    argv = ["collect", "--backend", "synthetic", "--host-id", host, "--spool-dir", str(spool)]
    assert main([*argv, "--no-send", "--max-ticks", "1", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dprobe collect: collector.host_id ")
    assert list(tmp_path.iterdir()) == []  # nothing written, in spool_dir or beside it


@pytest.mark.parametrize("once", [True, False])
def test_a_proc_root_that_is_no_procfs_exits_2_naming_it(
    once: bool, capsys, tmp_path, monkeypatch
) -> None:
    """A mistyped proc_root (a container's mount of the host's /proc) would leave every
    process unassigned, tick after tick, counted as proc_vanished: refused at start."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    argv = ["collect", "--backend", "nvml", "--proc-root", str(tmp_path / "host-proc")]
    run = ["--once"] if once else ["--no-send", "--max-ticks", "1", "--metrics-port", "0"]
    assert main([*argv, *run]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dprobe collect: collector.proc_root: "), err


def test_an_accelerated_clock_sent_to_kafka_is_warned_about(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker dead-letters snapshots stamped ahead of their Kafka record: say so."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    base = ["--bootstrap", "127.0.0.1:1", "collect", "--backend", "synthetic"]
    run = ["--clock-speed", "60", "--max-ticks", "1", "--metrics-port", "0"]
    for extra, warned in (([], True), (["--no-send"], False)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dprobe.commands.collect"):
            assert main([*base, *run, *extra]) == 0
        said = [r.getMessage() for r in caplog.records if "runs ahead" in r.getMessage()]
        assert bool(said) == warned, said
        assert not warned or "dead-letters snapshots" in said[0]


@pytest.mark.parametrize("host", ["gpu-01.rack-3.example.com", "node_7", "..hidden", "vc a"])
def test_real_host_names_stay_valid_host_ids(host: str, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["collect", "--backend", "synthetic", "--host-id", host, "--once"]) == 0
    assert decode_snapshot(capsys.readouterr().out.encode()).host == host


def _seq_in(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


@pytest.mark.slow  # starts dprobe processes
def test_sigterm_spools_everything_and_exits_0(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), DPROBE_KAFKA_BOOTSTRAP="127.0.0.1:1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dprobe.cli",
            "collect",
            "--backend",
            "synthetic",
            "--host-id",
            "n1",
            "--interval",
            "0.05",
            "--metrics-port",
            "0",
            "--shutdown-timeout",
            "1",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    spool_dir = tmp_path / "dprobe" / "spool" / "n1"
    seq_file = tmp_path / "dprobe" / "collector" / "seq-n1"
    # stop once a few snapshots were taken (the seq file is replaced atomically; waiting
    # for it, not for a fixed time, keeps the test right on a loaded machine)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _seq_in(seq_file) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the collector did not stop within 30 s of SIGTERM:\n{err[-3000:]}")
    assert proc.returncode == 0, err
    taken = int(seq_file.read_text())
    spool = Spool(spool_dir)
    spool.open()
    # Kafka was unreachable: every snapshot taken is still in the spool, in order
    records = spool.read(max_records=100_000)
    assert [r.seq for r in records] == list(range(taken))
    assert taken >= 3
    spool.close()


async def test_snapshots_never_carry_command_lines_or_environment(tmp_path, proc_tree) -> None:
    proc_tree.add(
        4242,
        "0::/research.slice/x.service\n",
        env={"DPROBE_TENANT": "vc-env", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"},
        cmdline="python train.py --token=tok-123456",
    )
    c = Collector(
        NvmlBackend(FakeNvml([FakeGpu(uuid="GPU-a", procs={4242: 1 << 30})])),
        host="h",
        interval_s=1,
        spool=Spool(tmp_path / "s", fsync=False),
        seq=SeqCounter(tmp_path / "q", fsync=False),
        metrics=CollectorMetrics(CollectorRegistry()),
        clock=ManualClock(),
        resolver=TenantResolver(
            proc_root=proc_tree.root, env_vars=["DPROBE_TENANT"], pod_log_dir=None
        ),
        max_ticks=1,
    )
    async with c:
        await c.wait()
    c.spool.open()
    (record,) = c.spool.read()
    c.spool.close()
    raw = record.payload
    assert json.loads(raw)["procs"][0]["tenant"] == "vc-env"
    for secret in (b"s3cr3t-value", b"tok-123456", b"train.py", b"AWS_SECRET", b"DPROBE_TENANT"):
        assert secret not in raw


@pytest.mark.slow  # starts dprobe processes
def test_a_killed_collector_loses_at_most_the_tick_in_progress(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    cmd = [
        sys.executable,
        "-m",
        "dprobe.cli",
        "collect",
        "--backend",
        "synthetic",
        "--host-id",
        "n1",
        "--interval",
        "0.02",
        "--metrics-port",
        "0",
        "--no-send",
    ]
    spool_dir = tmp_path / "dprobe" / "spool" / "n1"
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while (
        time.monotonic() < deadline
        and sum(f.stat().st_size for f in spool_dir.glob("*.spool")) < 50_000
    ):
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no flush, no cleanup
    proc.wait(timeout=10)
    subprocess.run([*cmd, "--max-ticks", "3"], env=env, check=True, stderr=subprocess.DEVNULL)

    spool = Spool(spool_dir)
    spool.open()
    seqs = [r.seq for r in spool.read(max_records=100_000, max_bytes=1 << 30)]
    spool.close()
    before, after = seqs[:-3], seqs[-3:]
    assert before == list(range(len(before))) and len(before) > 5
    # the restart continues after the last spooled seq; at most the one tick that was
    # in progress when the process died is missing
    assert after[0] in (len(before), len(before) + 1)
    assert after == list(range(after[0], after[0] + 3))


def test_an_empty_host_id_flag_exits_2_instead_of_taking_the_host_name(capsys) -> None:
    """``--host-id "$NODE_NAME"`` with the variable unset: in a pod the host name is the
    pod's, a new host at each re-creation, so it is refused rather than used."""
    assert main(["collect", "--backend", "synthetic", "--host-id", "", "--once"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip().splitlines() == [
        "dprobe collect: --host-id is empty: give the node's name, or leave the flag out "
        "for the host name"
    ]


def test_a_state_folder_it_cannot_write_exits_2_at_start_not_at_the_first_tick(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the seq is written back as it is loaded: a state folder it may not write in (an
    # immutable folder, a read-only mount) is a setting to fix, said before any tick
    real_save = SeqCounter._save
    state = tmp_path / "state"

    def refuse(self: SeqCounter, value: int) -> None:
        if self.path.parent == state:
            raise PermissionError(13, "Permission denied", str(self.path) + ".tmp")
        real_save(self, value)

    monkeypatch.setattr(SeqCounter, "_save", refuse)
    argv = ["collect", "--backend", "synthetic", "--no-send", "--max-ticks", "3"]
    argv += ["--spool-dir", str(tmp_path / "spool"), "--state-dir", str(state)]
    assert main([*argv, "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dprobe collect: cannot use the spool or state folder: ")
    assert str(state) in err and "Traceback" not in err


def test_loading_the_seq_writes_it_back(tmp_path: Path) -> None:
    path = tmp_path / "seq-h1"
    SeqCounter(path, fsync=False).load(floor=5)
    assert path.read_text() == "5\n"
