"""A local broker the demo could not start is reported as such: the line before the
error says its start failed (it said "still starting" with --keep-broker), and no
"interrupted" line follows."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import _free_port


@pytest.mark.parametrize("keep", [False, True])
def test_a_broker_that_cannot_start_is_said_to_have_failed(tmp_path: Path, keep: bool) -> None:
    port = _free_port()
    with socket.socket() as taken:  # the controller's port is someone else's
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = {
            **os.environ,
            "DPROBE_BROKER_PORT": str(port),
            "DPROBE_BROKER_CONTROLLER_PORT": str(taken.getsockname()[1]),
            "DPROBE_BROKER_STATE_DIR": str(tmp_path / "broker"),
        }
        done = subprocess.run(
            [sys.executable, "-m", "dprobe.cli", "--bootstrap", f"127.0.0.1:{port}", "demo",
             "--out", str(tmp_path / "out"), *(["--keep-broker"] if keep else [])],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert "dprobe demo: stopping the broker the demo started (its start failed)" in lines
    assert "is already in use by another process" in lines[-1]
    assert not any("interrupted" in line or "keeps running" in line for line in lines)
