"""Ctrl-C or SIGTERM while ``dprobe replay --shift-to-now`` is still reading the trace for
its span (before anything is sent) ends it as it does later on: one line, exit 130 or 143
(it was a silent 130, and SIGTERM killed it outright)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("sig", "code", "how"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped (SIGTERM)")],
)
def test_a_signal_during_the_span_pass_is_one_line(
    tmp_path: Path, sig: signal.Signals, code: int, how: str
) -> None:
    trace = tmp_path / "demand.csv"
    rows = "".join(f"{60 * i},vc-{i % 9},{i % 13}\n" for i in range(1_000_000))
    trace.write_text("ts,tenant,demand_gpus\n" + rows)
    argv = [sys.executable, "-m", "dprobe.cli", "--bootstrap", "127.0.0.1:1", "replay",
            str(trace), "--format", "demand-csv", "--shift-to-now", "--speed", "max"]  # fmt: skip
    with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("--shift-to-now: reading"):
                break
        proc.send_signal(sig)
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == code, err
    assert err.splitlines() == [f"dprobe replay: {how} before any record was sent"]


def test_ctrl_c_while_connecting_is_the_same_line(tmp_path: Path) -> None:
    """A "broker" that takes the connection and never answers: the replay waits in its
    start, and Ctrl-C there says nothing was sent (not "0 records sent ... delivered")."""
    import socket

    trace = tmp_path / "demand.csv"
    trace.write_text("ts,tenant,demand_gpus\n0,a,1\n60,a,2\n")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        argv = [sys.executable, "-m", "dprobe.cli", "--bootstrap", f"127.0.0.1:{port}",
                "replay", str(trace), "--format", "demand-csv", "--no-progress"]  # fmt: skip
        with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True) as proc:
            assert proc.stderr is not None
            silent.settimeout(60)
            conn, _ = silent.accept()
            proc.send_signal(signal.SIGINT)
            err = proc.stderr.read()
            conn.close()
            assert proc.wait(timeout=60) == 130, err
    assert err.splitlines()[-1] == "dprobe replay: interrupted before any record was sent"
