"""A worker stopped while it still waits for Kafka at startup (a broker down or not yet
up) stops at once, says so in one line and exits 0, as a running worker's clean stop
does (the systemd unit's SIGTERM and Ctrl-C): a real ``dprobe worker`` process, a
port nobody listens on, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import _free_port


def _worker_waiting(
    tmp_path: Path, bootstrap: str
) -> tuple[subprocess.Popen[str], threading.Thread, list[str]]:
    """A worker retrying an unreachable Kafka, the thread that reads on what it writes,
    and its lines."""
    env = {**os.environ, "DPROBE_WORKER_METRICS_PORT": "0"}
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", bootstrap, "worker"]
    proc = subprocess.Popen(
        [*cmd, "--data-dir", str(tmp_path / "state")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    waiting = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "is unreachable" in line and "retrying" in line:
                waiting.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not waiting.wait(120):
        proc.kill()
        pytest.fail("the worker never said it waits for Kafka:\n" + "".join(lines))
    return proc, reader, lines


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_while_waiting_for_kafka_is_prompt_clean_and_said(
    tmp_path: Path, sig: signal.Signals
) -> None:
    bootstrap = f"127.0.0.1:{_free_port()}"  # nothing listens there
    proc, reader, lines = _worker_waiting(tmp_path, bootstrap)
    began = time.monotonic()
    proc.send_signal(sig)
    code = proc.wait(timeout=60)
    took = time.monotonic() - began
    reader.join(10)  # it has taken the last lines
    assert proc.stdout is not None
    proc.stdout.close()
    out = "".join(lines)
    assert code == 0, out  # what a running worker's clean stop exits with
    assert took < 10, out  # not after the retries run out
    said = [line for line in lines if "stopped by" in line]
    assert len(said) == 1, out
    assert f"stopped by {sig.name} while waiting for Kafka at {bootstrap}" in said[0]
    assert "Traceback" not in out
    after = out[out.index(said[0]) + len(said[0]) :]
    assert "unreachable" not in after  # no retry after the stop
