"""An archive row whose event time lies outside the schema's bounds (epoch seconds from
1970 to 1e11 s) is refused naming the file and row: a ``ts`` written in milliseconds would
otherwise be replayed as a span a thousand times as long, and a huge one crashed the
progress line."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.errors import UsageError
from dprobe.schema import JobEvent, encode
from dprobe.sinks.archive_schema import row_of
from dprobe.sinks.parquet_archive import ArchiveWriter
from dprobe.traces.archive_reader import read_archive


def _archive(root: Path, column_ts: list[float]) -> None:
    """Jobs whose values hold a valid time and whose ``ts`` column holds ``column_ts``
    (as another tool, or a hand-edited file, could write)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    w = ArchiveWriter(root, fsync=False)
    for i in range(len(column_ts)):
        ev = JobEvent(ts=1_590_000_000.0 + 60 * i, event="submit", job=f"j{i}", tenant="a", gpus=1)
        w.add("jobs", row_of("jobs", ev, key=None, value=encode(ev), partition=0, offset=i,
                             timestamp_ms=None))  # fmt: skip
    w.flush()
    (f,) = root.rglob("*.parquet")
    t = pq.read_table(f)
    at = t.schema.get_field_index("ts")
    pq.write_table(t.set_column(at, t.schema.field(at), pa.array(column_ts)), f)


@pytest.mark.parametrize(
    ("column_ts", "row"),
    [
        ([1_590_000_000_000.0, 1_590_000_060_000.0], 1),  # milliseconds
        ([1_590_000_000.0, 1e20], 2),  # past the year 5138
        ([1_590_000_000.0, -5.0], 2),  # before 1970
    ],
)
def test_an_event_time_outside_the_schema_is_refused_naming_the_row(
    tmp_path: Path, column_ts: list[float], row: int
) -> None:
    _archive(tmp_path, column_ts)
    with pytest.raises(UsageError, match=rf"jobs-p0-o0-o1\.parquet: row {row}: ts must be "):
        list(read_archive(tmp_path))


def test_event_times_within_the_bounds_are_read(tmp_path: Path) -> None:
    w = ArchiveWriter(tmp_path, fsync=False)
    for i, t in enumerate([0.0, 1e11]):  # each in the folder of its hour
        ev = JobEvent(ts=t, event="submit", job=f"j{i}", tenant="a", gpus=1)
        w.add("jobs", row_of("jobs", ev, key=None, value=encode(ev), partition=0, offset=i,
                             timestamp_ms=None))  # fmt: skip
    w.flush()
    assert [r.ts for r in read_archive(tmp_path)] == [0.0, 1e11]
