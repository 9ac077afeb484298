"""A full spool during a long outage drops its oldest snapshot at every tick: each drop
is counted, but the log says so at most once a minute (it said so at every tick), with
how many more were dropped since."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dprobe.collectors import spool as spool_module
from dprobe.collectors.spool import Spool


def _fill(spool: Spool, seqs: range) -> None:
    for seq in seqs:
        spool.append(seq, b"x" * 900)


def test_drops_of_a_full_spool_are_logged_once_a_minute_and_all_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(spool_module, "_monotonic", lambda: now[0], raising=False)
    counted: list[int] = []
    spool = Spool(
        tmp_path,
        max_bytes=4000,
        segment_bytes=1000,
        fsync=False,
        on_drop=lambda n, reason: counted.append(n),
    )
    spool.open()
    with caplog.at_level(logging.WARNING, logger="dprobe.collectors.spool"):
        _fill(spool, range(40))
        first = [r.getMessage() for r in caplog.records]
        now[0] += 61.0
        _fill(spool, range(40, 41))
    said = [r.getMessage() for r in caplog.records]
    spool.close()
    assert sum(counted) == spool.dropped >= 36  # every drop is counted
    assert len(first) == 1 and first[0].startswith("spool full (4000 bytes): dropped 1 oldest")
    assert "at most once a minute" in first[0]
    assert len(said) == 2
    assert said[1].startswith(
        f"spool full (4000 bytes): dropped 1 oldest snapshot, and {sum(counted) - 2:,} more "
    )


@pytest.mark.parametrize("ends", ["caught up", "closed"])
def test_drops_not_logged_yet_are_logged_when_the_outage_ends_or_the_spool_closes(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    ends: str,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(spool_module, "_monotonic", lambda: now[0], raising=False)
    spool = Spool(tmp_path, max_bytes=4000, segment_bytes=1000, fsync=False)
    spool.open()
    with caplog.at_level(logging.WARNING, logger="dprobe.collectors.spool"):
        _fill(spool, range(40))  # one line, then drops within the minute: not logged yet
        assert len(caplog.records) == 1
        unsaid = spool.dropped - 1
        now[0] += 5.0
        if ends == "caught up":  # Kafka is back: everything left is delivered
            while records := spool.read():
                spool.ack(records[-1].end, len(records))
            assert spool.pending_records == 0
        spool.close()
        said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert said[1].startswith(f"spool full: dropped {unsaid:,} more snapshots since ")
    assert spool.dropped == unsaid + 1
    spool.close()  # nothing more to say at a second close
    assert len(caplog.records) == 2
