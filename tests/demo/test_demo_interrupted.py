"""Ctrl-C stops ``dprobe demo`` the same way at any point, while the broker it started is
still starting too: one last line says so, exit 130, and no process it started is left
(it was a silent 130 during the broker's start)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dprobe.broker import LocalBroker
from dprobe.config import BrokerSettings
from tests.conftest import _free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAST_LINE = "dprobe demo: interrupted: everything stopped, no chart written"


def _running_with(text: str, group: int | None = None) -> list[str]:
    """Live processes (not zombies) whose command line mentions ``text``, of process group
    ``group`` when given."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = stat[0], int(stat[2])
        if text in cmdline and state != "Z" and group in (None, pgrp):
            found.append(f"{proc.name}: {cmdline}")
    return found


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = path.read_text()
        if text in seen:
            return seen
        assert proc.poll() is None, seen
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not seen in {timeout_s:g} s:\n{path.read_text()}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("phase", "sig", "keep"),
    [
        ("starting the local one", signal.SIGINT, False),  # the broker's start script runs
        ("worker started", signal.SIGINT, False),  # the broker is ready, the worker starts
        ("starting the local one", signal.SIGTERM, False),  # a service manager, `timeout`
        ("starting the local one", signal.SIGINT, True),  # nothing to keep yet
    ],
)
def test_ctrl_c_at_any_phase_stops_everything_and_says_so_last(
    tmp_path: Path, phase: str, sig: signal.Signals, keep: bool
) -> None:
    port, cport = _free_port(), _free_port()
    state = tmp_path / "broker"
    env = {
        **os.environ,
        "DPROBE_BROKER_PORT": str(port),
        "DPROBE_BROKER_CONTROLLER_PORT": str(cport),
        "DPROBE_BROKER_STATE_DIR": str(state),
        "DPROBE_WORKER_METRICS_PORT": str(_free_port()),
    }
    err, log = tmp_path / "stderr", tmp_path / "stdout"
    out = tmp_path / "out"
    settings = BrokerSettings(port=port, controller_port=cport, state_dir=state)
    with err.open("wb") as err_file, log.open("wb") as log_file:
        # its own process group, as a shell's job: Ctrl-C reaches the whole group
        proc = subprocess.Popen(
            [sys.executable, "-m", "dprobe.cli", "--bootstrap", f"127.0.0.1:{port}", "demo",
             "--duration", "30", "--out", str(out), *(["--keep-broker"] if keep else [])],
            env=env, stdout=log_file, stderr=err_file, start_new_session=True,
        )  # fmt: skip
        try:
            _wait_for(err, phase, proc, timeout_s=200)
            time.sleep(1.0)  # well inside the phase: the start script or the worker runs
            os.killpg(proc.pid, sig)
            proc.wait(timeout=90)
            time.sleep(0.5)
            # nothing it started runs on: the broker (in a session of its own), the
            # worker and the broker's start script (in the demo's process group)
            left = _running_with(str(state))
            left += _running_with("", group=proc.pid)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            state_after = LocalBroker(settings).status()
            LocalBroker(settings).stop()
    lines = err.read_text().splitlines()
    assert proc.returncode == 130, "\n".join(lines)
    assert lines[-1] == LAST_LINE, "\n".join(lines)
    assert sum("interrupted" in line for line in lines) == 1, "\n".join(lines)
    why = (
        "still starting" if phase == "starting the local one" else "--keep-broker leaves it running"
    )
    assert f"dprobe demo: stopping the broker the demo started ({why})" in lines
    assert left == [] and state_after == "stopped", (left, state_after)
    assert not (out / "demo.png").exists()
    if phase == "worker started":  # the summary of what it saw so far, as before
        assert "summary: windows: " in log.read_text()
