"""Ctrl-C during ``dprobe evaluate`` or ``dprobe simulate`` ends it with exit 130 and one
line saying so (it was a silent 130: a user could not tell an interrupt from a crash of
a child, nor that no report was written)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest


def _demand(path: Path) -> Path:
    rows = "".join(f"{600 * i},vc-{i % 7},{(i * 37) % 50}\n" for i in range(60_000))
    path.write_text("ts,tenant,demand_gpus\n" + rows)
    return path


def _jobs(path: Path) -> Path:
    rows = "".join(f"{i},vc_{i % 5},{1 + i % 8},{i // 3},{30 + i % 400}\n" for i in range(40_000))
    path.write_text("job_id,user,num_gpu,submit_time,duration\n" + rows)
    return path


@pytest.mark.parametrize("command", ["evaluate", "simulate"])
def test_ctrl_c_says_interrupted_in_one_line(tmp_path: Path, command: str) -> None:
    if command == "evaluate":
        args = [
            "evaluate",
            "--trace",
            str(_demand(tmp_path / "d.csv")),
            "--format",
            "demand-csv",
            "--no-plots",
            "--models",
            "last-value,holt-winters",
        ]
        started = "split: "  # printed once the trace is read, before the models run
    else:
        args = [
            "simulate",
            "--jobs",
            str(_jobs(tmp_path / "j.csv")),
            "--nodes",
            "40",
            "--modes",
            "static,reactive",
            "--chart",
            "",
        ]
        started = "quota settings: "  # printed before the runs start
    with subprocess.Popen(
        [sys.executable, "-m", "dprobe.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    ) as proc:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith(started):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + err
    assert out == ""
    assert err.splitlines() == [f"dprobe {command}: interrupted"]
