"""A new spool survives a power loss: the folders made for it and its first segment file
are fsynced into their parents, not only the records written into the file (a file
whose entry was never made durable can vanish with everything in it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dprobe.collectors.spool import Spool


def _synced_paths(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path ``os.fsync`` is called on from now on (read back from its descriptor)."""
    synced: list[Path] = []
    real = os.fsync

    def record(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    return synced


def test_a_new_spool_fsyncs_each_folder_made_and_its_first_segment_into_their_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = _synced_paths(monkeypatch)
    folder = tmp_path / "spool" / "gpu-1"
    spool = Spool(folder, fsync=True)
    spool.open()
    spool.append(0, b"snapshot")
    spool.close()
    segments = [p for p in folder.iterdir() if p.name.endswith(".spool")]
    assert segments, sorted(folder.iterdir())
    # the entries of spool/ (in tmp_path), gpu-1/ (in spool/) and the segment (in gpu-1/)
    for parent in (tmp_path, tmp_path / "spool", folder):
        assert parent in synced, (parent, synced)


def test_reopening_an_existing_spool_does_not_fsync_its_parents_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "gpu-1"
    first = Spool(folder, fsync=True)
    first.open()
    first.close()
    synced = _synced_paths(monkeypatch)
    Spool(folder, fsync=True).open()
    assert tmp_path not in synced


def test_without_fsync_nothing_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced = _synced_paths(monkeypatch)
    spool = Spool(tmp_path / "spool" / "gpu-1", fsync=False)
    spool.open()
    spool.append(0, b"snapshot")
    assert synced == []
