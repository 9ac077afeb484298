"""An archive that cannot start (Kafka unreachable) leaves no folder behind: the folders it
made for its output are removed again, those that were there before are kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _archive(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dprobe.cli", "--bootstrap", "127.0.0.1:1", "archive",
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_kafka_unreachable_leaves_no_new_folder(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deep" / "archive"
    done = _archive(out)
    assert done.returncode == 2, done.stderr
    assert "cannot reach Kafka at 127.0.0.1:1" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_kafka_unreachable_keeps_the_folders_that_were_there(tmp_path: Path) -> None:
    out = tmp_path / "archive"
    out.mkdir()
    (tmp_path / "parent").mkdir()
    assert _archive(out).returncode == 2
    assert _archive(tmp_path / "parent" / "archive").returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive", "parent"]
    assert list(out.iterdir()) == [] and list((tmp_path / "parent").iterdir()) == []
