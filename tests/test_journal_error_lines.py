"""Under systemd, the one line a command exits 1 or 2 with is an error for the journal.

journald takes an unprefixed line at the unit's default priority (info), so without a
``<3>`` prefix ``journalctl -u dprobe-collector -p warning`` would hide the very reason
a unit restarts every 10 s (no NVIDIA driver, a refused setting, a misspelt flag).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _stderr_of(argv: list[str], err: Path, journal_stream: Path) -> tuple[int, list[str]]:
    st = os.stat(journal_stream)
    env = {**os.environ, "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
    with open(err, "a") as fh:
        done = subprocess.run(
            [sys.executable, "-m", "dprobe.cli", *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=fh,
            timeout=120,
            check=False,
        )
    return done.returncode, err.read_text().splitlines()


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["collect", "--backend", "synthetic", "--interval", "0"], "collector.interval_s"),
        (["collect", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_the_reason_a_command_exits_2_with_is_an_error_in_the_journal(
    argv: list[str], reason: str, tmp_path: Path
) -> None:
    err = tmp_path / "stderr"
    err.touch()
    code, lines = _stderr_of(argv, err, journal_stream=err)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("<3>dprobe collect: "), lines
    assert reason in lines[0]
    elsewhere = tmp_path / "elsewhere"  # stderr not the journal: the line as it always was
    elsewhere.touch()
    code, lines = _stderr_of(argv, elsewhere, journal_stream=err)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dprobe collect: "), lines


CRASHING_COMMAND = """
import sys
import dprobe.commands.config as command
def run(args):
    raise RuntimeError("a bug")
command.run = run  # a command failing in a way it does not expect: a bug
from dprobe.cli import main
sys.exit(main(["config", "check"]))
"""


def test_a_crash_traceback_is_an_error_in_the_journal_line_by_line(tmp_path: Path) -> None:
    """A bug exits 1 with a traceback: under systemd each of its lines is an error too."""
    err = tmp_path / "stderr"
    err.touch()
    st = os.stat(err)
    with open(err, "a") as fh:
        done = subprocess.run(
            [sys.executable, "-c", CRASHING_COMMAND],
            env={**os.environ, "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"},
            stdout=subprocess.DEVNULL,
            stderr=fh,
            timeout=120,
            check=False,
        )
    lines = err.read_text().splitlines()
    assert done.returncode == 1
    assert lines[0] == "<3>Traceback (most recent call last):", lines
    assert lines[-1] == "<3>RuntimeError: a bug"
    assert all(line.startswith("<3>") for line in lines), lines
