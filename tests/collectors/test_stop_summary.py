"""The line a stopped collector ends with counts one snapshot in the singular."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dprobe.cli import main


def test_the_stop_line_counts_one_snapshot_in_the_singular(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    argv = ["collect", "--backend", "synthetic", "--no-send", "--max-ticks", "1"]
    argv += ["--metrics-port", "0", "--spool-dir", str(tmp_path / "spool")]
    argv += ["--state-dir", str(tmp_path / "state")]
    with caplog.at_level(logging.INFO, logger="dprobe.collect"):
        assert main(argv) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "dprobe.collect"]
    assert said[-1] == "stopped after 1 snapshot; 1 left in the spool"
