"""Archive files lie in the folder of their event-time hour, and a replay sends the
records in event-time order. A file moved into another hour's folder, or an hour folder
named without its leading zero (``hour=4``, as other tools write it), would otherwise be
replayed out of order (the worker drops what goes back in time as late): the hours are
taken in time order, and a file whose rows lie outside its folder's hour is refused,
naming it, before any record is sent."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dprobe.errors import UsageError
from dprobe.schema import JobEvent, encode
from dprobe.sinks.archive_schema import row_of
from dprobe.sinks.parquet_archive import ArchiveWriter, hour_dir
from dprobe.traces.archive_reader import read_archive
from dprobe.traces.replay_sources import open_source

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def _archive(root: Path, times: list[float]) -> None:
    w = ArchiveWriter(root, fsync=False)
    for i, t in enumerate(times):
        ev = JobEvent(ts=t, event="submit", job=f"j{i}", tenant="a", gpus=1)
        w.add("jobs", row_of("jobs", ev, key=None, value=encode(ev), partition=0, offset=i,
                             timestamp_ms=None))  # fmt: skip
        w.flush()  # one file per record


def test_an_hour_folder_without_its_leading_zero_is_read_in_time_order(tmp_path: Path) -> None:
    times = [T0 + 3600 * h for h in range(14)]  # 22:13 .. 11:13 the next day
    _archive(tmp_path, times)
    for day in (tmp_path / "jobs").iterdir():
        for hour in day.iterdir():
            hour.rename(hour.with_name(f"hour={int(hour.name[5:])}"))  # hour=4, hour=10
    assert [r.ts for r in read_archive(tmp_path)] == sorted(times)


@pytest.mark.parametrize("how", ["open_source", "read_archive"])
def test_a_file_in_another_hours_folder_is_refused_naming_it(tmp_path: Path, how: str) -> None:
    _archive(tmp_path, [T0, T0 + 3600, T0 + 7200])
    moved = next((tmp_path / hour_dir("jobs", T0 + 7200)).iterdir())
    to = tmp_path / hour_dir("jobs", T0)
    shutil.move(moved, to / moved.name)
    with pytest.raises(
        UsageError, match=rf"{moved.name}: .*2023-11-15 00:13.*date=2023-11-14/hour=22"
    ) as e:
        if how == "open_source":
            open_source(tmp_path, "dprobe-parquet")
        else:
            list(read_archive(tmp_path))
    assert "date=2023-11-15/hour=00" in str(e.value)  # where it belongs


def test_an_hour_folder_that_names_no_hour_is_refused(tmp_path: Path) -> None:
    _archive(tmp_path, [T0])
    (f,) = tmp_path.rglob("*.parquet")
    bad = f.parent.with_name("hour=xx")
    f.parent.rename(bad)
    with pytest.raises(UsageError, match=r"hour=xx: .*not an hour"):
        open_source(tmp_path, "dprobe-parquet")


def test_one_file_outside_an_archive_folder_is_read(tmp_path: Path) -> None:
    _archive(tmp_path / "a", [T0])
    (f,) = (tmp_path / "a").rglob("*.parquet")
    alone = tmp_path / f.name  # copied out of its hour folder
    shutil.copy(f, alone)
    records, total = open_source(alone, "dprobe-parquet")
    assert ([r.ts for r in records], total) == ([T0], 1)


def test_in_an_archive_without_leading_zeros_the_folder_named_has_none(tmp_path: Path) -> None:
    """The folder a moved file belongs in is named as the archive's other folders are:
    ``hour=0`` where another tool wrote ``hour=4``, ``hour=00`` in a dprobe archive."""
    times = [T0 + 3600 * h for h in range(8)]  # 22:13 .. 05:13 the next day
    _archive(tmp_path, times)
    for day in (tmp_path / "jobs").iterdir():
        for hour in day.iterdir():
            hour.rename(hour.with_name(f"hour={int(hour.name[5:])}"))
    moved = next((tmp_path / "jobs" / "date=2023-11-15" / "hour=0").iterdir())
    shutil.move(moved, tmp_path / "jobs" / "date=2023-11-14" / "hour=22" / moved.name)
    with pytest.raises(UsageError) as e:
        open_source(tmp_path, "dprobe-parquet")
    assert str(e.value).endswith("it belongs in jobs/date=2023-11-15/hour=0")
