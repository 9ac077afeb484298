"""A commit that fails with a timeout of its own during a normal flush is a failure of
the archive, as any other commit error is: its offsets are not dropped as if the archive
were stopping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from dprobe.config import ArchiveSettings
from dprobe.sinks.archive_service import Archiver


class TimingOut:
    def __init__(self) -> None:
        self.commits = 0

    async def commit(self, offsets: Any) -> None:
        self.commits += 1
        raise TimeoutError("a socket read timed out")


async def test_a_timeout_inside_a_normal_commit_stops_the_archive(tmp_path: Path) -> None:
    archiver = Archiver(ArchiveSettings(out_dir=tmp_path / "archive"))
    consumer = TimingOut()
    archiver.consumer = consumer  # type: ignore[assignment]
    archiver._next = {TopicPartition("dprobe.samples", 0): 12}
    with pytest.raises(TimeoutError):
        await archiver.flush()
    with pytest.raises(TimeoutError):  # the archiver stays failed: nothing is committed
        await archiver.flush()
    assert consumer.commits == 1


async def test_the_stop_s_bounded_commit_keeps_the_files_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archiver = Archiver(ArchiveSettings(out_dir=tmp_path / "archive"))
    archiver.consumer = TimingOut()  # type: ignore[assignment]
    archiver._next = {TopicPartition("dprobe.samples", 0): 12}
    await archiver.flush(commit_within_s=0.5)
    assert "offsets of 1 partition(s) not committed" in caplog.text
