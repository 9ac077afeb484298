"""Log lines under systemd: a syslog priority per line, journald's time instead of ours."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from dprobe.journal_log import JournalFormatter, stderr_is_journal

MISSPELT = {"DPROBE_WORKR_WINDOW_S": "30"}  # logs one warning through the root logger


def _stream_id(path: Path) -> str:
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"


def test_the_journal_is_recognised_by_the_stream_systemd_named(tmp_path: Path) -> None:
    mine, other = tmp_path / "journal", tmp_path / "elsewhere"
    mine.touch()
    other.touch()
    with open(mine) as fh:
        assert stderr_is_journal(fh, {"JOURNAL_STREAM": _stream_id(mine)})
        assert not stderr_is_journal(fh, {"JOURNAL_STREAM": _stream_id(other)})  # redirected
        assert not stderr_is_journal(fh, {})
        assert not stderr_is_journal(fh, {"JOURNAL_STREAM": "junk"})
    assert not stderr_is_journal(fh, {"JOURNAL_STREAM": _stream_id(mine)})  # closed


def test_every_line_of_a_record_carries_its_priority() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("dprobe.w", logging.ERROR, "", 0, "failed", None, exc_info)
    lines = JournalFormatter().format(record).splitlines()
    assert lines[0] == "<3>ERROR dprobe.w: failed"
    assert lines[-1] == "<3>RuntimeError: boom" and len(lines) > 2
    assert all(line.startswith("<3>") for line in lines)


def _warning_line(env: dict[str, str], err: Path) -> str:
    with open(err, "a") as fh:
        done = subprocess.run(
            [sys.executable, "-m", "dprobe.cli", "config", "show", "worker"],
            env={**os.environ, **MISSPELT, **env},
            stdout=subprocess.DEVNULL,
            stderr=fh,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0
    return err.read_text().splitlines()[0]


def test_a_service_under_systemd_logs_priorities_and_elsewhere_timestamps(
    tmp_path: Path,
) -> None:
    err = tmp_path / "stderr"
    err.touch()
    said = "dprobe.config: environment variable DPROBE_WORKR_WINDOW_S names no section"
    line = _warning_line({"JOURNAL_STREAM": _stream_id(err)}, err)
    assert line.startswith(f"<4>WARNING {said}")
    plain = tmp_path / "plain"
    plain.touch()
    line = _warning_line({"JOURNAL_STREAM": _stream_id(err)}, plain)  # stderr elsewhere
    assert line[:2] == "20" and f" WARNING {said}" in line  # '2026-12-06 23:02:21,478 ...'
