"""The counts ``dprobe replay`` prints read as English: one record, two records."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path


def _one_record_archive(folder: Path) -> Path:
    """A ``dprobe archive`` folder that holds a single job event."""
    from dprobe.schema import JobEvent, encode
    from dprobe.sinks.archive_schema import row_of
    from dprobe.sinks.parquet_archive import ArchiveWriter

    w = ArchiveWriter(folder, fsync=False)
    msg = JobEvent(ts=1_700_000_000.0, event="submit", job="j1", tenant="a", gpus=1)
    w.add(
        "jobs",
        row_of("jobs", msg, key=b"k", value=encode(msg), partition=0, offset=0, timestamp_ms=None),
    )
    w.flush()
    return folder


def test_a_replay_of_one_record_says_record(kafka_bootstrap: str, tmp_path: Path) -> None:
    archive = _one_record_archive(tmp_path / "archive")
    done = subprocess.run(
        [
            sys.executable, "-m", "dprobe.cli", "--log-level", "WARNING",
            "--bootstrap", kafka_bootstrap, "replay", str(archive),
            "--format", "dprobe-parquet", "--no-progress",
            "--prefix", f"one{uuid.uuid4().hex[:8]}.",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("replayed 1 record (1 jobs), "), last
