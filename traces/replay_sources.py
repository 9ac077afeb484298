"""The records to replay for a path and a ``--format``, in event-time order.

=================  ======================================================================
format             becomes
=================  ======================================================================
``dprobe-parquet``  the archived samples, job events and cluster reports, byte for byte
``demand-csv``      synthetic hosts of running GPUs + a pending job per tenant
``helios-vc``       the same; running/pending/total GPUs of each VC minute
``jobs-csv``        submit/start/finish JobEvents + synthetic hosts of running jobs
=================  ======================================================================

Malformed rows are reported to ``on_bad`` (file and line) and skipped, or raise a
``UsageError`` with ``strict``; a demand row whose time goes backwards is malformed too.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "d.csv"
    >>> _ = p.write_text("ts,tenant,demand_gpus\\n0,a,2\\nbad,a,1\\n")
    >>> bad = []
    >>> recs, total = open_source(p, "demand-csv", on_bad=bad.append)
    >>> [r.kind for r in recs], len(bad)
    (['jobs', 'samples'], 1)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from dprobe.errors import UsageError
from dprobe.traces.archive_reader import archive_files, count_records, read_archive
from dprobe.traces.demand_series import read_trace
from dprobe.traces.jobs_csv import DEFAULT_TIME_UNIT_S, iter_jobs, without_far_jobs
from dprobe.traces.replay_demand import DemandLayout, demand_records
from dprobe.traces.replay_jobs import jobs_records
from dprobe.traces.replay_record import ReplayRecord

FORMATS: Final = ("dprobe-parquet", "demand-csv", "helios-vc", "jobs-csv")


def open_source(
    path: str | Path,
    fmt: str,
    *,
    layout: DemandLayout | None = None,
    time_unit_s: float = DEFAULT_TIME_UNIT_S,
    time_unit_flag: str | None = None,
    strict: bool = False,
    on_bad: Callable[[str], None] = lambda _msg: None,
) -> tuple[Iterator[ReplayRecord], int | None]:
    """``(records, total)``: the records of ``path`` and their number when known upfront;
    ``time_unit_flag`` as for :func:`~dprobe.traces.jobs_csv.iter_jobs`."""
    if fmt == "dprobe-parquet":
        files = archive_files(path)
        return read_archive(path, files), count_records(files)
    skip = None if strict else on_bad  # readers skip bad rows only when given on_bad
    if fmt in ("demand-csv", "helios-vc"):
        points = read_trace(path, fmt, on_bad=skip)  # type: ignore[arg-type]
        return demand_records(points, layout), None
    if fmt == "jobs-csv":
        jobs = iter_jobs(path, time_unit_s=time_unit_s, on_bad=skip, time_unit_flag=time_unit_flag)
        return jobs_records(without_far_jobs(jobs, str(path), skip), layout), None
    raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def first_hours(records: Iterable[ReplayRecord], hours: float) -> Iterator[ReplayRecord]:
    """The records of the first ``hours`` of event time.

    >>> recs = [ReplayRecord(t, "jobs", None, b"") for t in (0.0, 3599.0, 3600.0)]
    >>> [r.ts for r in first_hours(recs, 1)]
    [0.0, 3599.0]
    """
    it = iter(records)
    first = next(it, None)
    if first is None:
        return
    yield first
    end = first.ts + hours * 3600
    yield from itertools.takewhile(lambda r: r.ts < end, it)
