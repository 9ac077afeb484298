"""A synthetic job stream calibrated to the Helios Earth per-VC minute series.

For every VC file (``vc*.csv[.gz]``, tenant = file stem): its size is the median of
``total_gpu_num`` (in whole nodes); its demand per hour is the mean of ``running_gpu_num +
pending_gpu_num`` over that hour; jobs arrive as a Poisson process whose hourly rate makes
the expected demand match by Little's law (jobs per hour = demand x 3600 / E[GPUs x
duration]). The share of demand from jobs of >= 8 GPUs is the VC's share in the series;
sizes and durations are assumptions (settings): small jobs 1/2/4 GPUs, large 8/16 (at most
the VC's size), and a
log-normal duration with Helios Earth's median (234 s) and mean (5,131 s) GPU-job runtime,
cut at ``max_duration_s``. Nothing here is fitted to the Philly/Chronus trace.

Example:
    >>> import io
    >>> rows = ("time,running_gpu_num,pending_gpu_num,total_gpu_num,"
    ...         "running_gpu_num_noless_8,pending_gpu_num_noless_8\\n")
    >>> rows += "".join(f"2020-05-01 00:{m:02d}:00,8,0,16,8,0\\n" for m in range(60))
    >>> series = read_vc_series(io.StringIO(rows))
    >>> series.nodes, series.hourly_demand, series.large_share
    (2, [8.0], 1.0)
"""

from __future__ import annotations

import math
import statistics
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import numpy as np

from dprobe.errors import UsageError
from dprobe.traces.demand_series import gpu_count, parse_ts
from dprobe.traces.jobs_csv import JobRecord
from dprobe.traces.row_input import (
    CSV_SUFFIXES,
    MAX_GAP_S,
    at_line,
    csv_rows,
    open_text,
    shown,
)


def days_text(days: float) -> str:
    """A span in days for a message, singular for exactly one.

    >>> days_text(1), days_text(0.5), days_text(7)
    ('1 day', '0.5 days', '7 days')
    """
    return f"{days:g} day" if days == 1 else f"{days:g} days"


@dataclass(frozen=True)
class SyntheticSettings:
    """Assumptions of the generator (see module doc)."""

    days: float = 7.0
    node_gpus: int = 8
    small_sizes: tuple[tuple[int, float], ...] = ((1, 0.7), (2, 0.15), (4, 0.15))
    large_sizes: tuple[tuple[int, float], ...] = ((8, 0.8), (16, 0.2))
    duration_median_s: float = 234.0
    duration_mean_s: float = 5130.6
    max_duration_s: float = 3 * 86_400.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.days * 24 >= 1:
            raise ValueError("days must cover at least one hour (days >= 1/24)")


@dataclass(frozen=True)
class VcSeries:
    nodes: int
    hourly_demand: list[float]
    large_share: float
    first_hour: int = 0  # the hour of the first row, in hours since the epoch


MAX_GAP_HOURS = int(MAX_GAP_S // 3600)  # hours a series may skip (they hold its demand)

# The columns read; the header may spell them in any case (Helios files write ``Time`` or
# ``time``) and hold more.
COLUMNS = (
    "time",
    "running_gpu_num",
    "pending_gpu_num",
    "total_gpu_num",
    "running_gpu_num_noless_8",
    "pending_gpu_num_noless_8",
)


def read_vc_series(fh: IO[str], name: str = "<series>", node_gpus: int = 8) -> VcSeries:
    """Size, hourly mean demand and large-job share of one Helios VC minute series.

    A row that is not a Helios minute (a missing field, a count that is not finite or
    below 0, a time before the previous row's, the same as it, or over a year after it) is a
    :class:`UsageError` naming ``name`` and the line. Hours without a row hold the demand
    of the last hour that has rows."""
    rows = csv_rows(fh, name=name)
    fail = at_line(name)
    totals, hours, big, allg = [], [], 0.0, 0.0
    acc, n, hour, last = 0.0, 0, None, None
    first_ts: float | None = None
    first = next(rows, None)
    if first is None:
        raise UsageError(f"{name}:1: empty file (no header)")
    header = [h.strip().lower() for h in first[1]]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise UsageError(
            f"{name}:1: header lacks column(s) {', '.join(missing)} (found: {', '.join(header)})"
        )
    at = [header.index(c) for c in COLUMNS]
    for line, row in rows:
        if not row:  # a blank line
            continue
        if len(row) != len(header):
            raise fail(f"expected {len(header)} fields, found {len(row)}", line)
        text = row[at[0]]
        try:
            ts = parse_ts(text)
        except (ValueError, OverflowError):
            raise fail(f"time: not a date-time: {shown(text)}", line) from None
        # Rows must be in time order, as the real Helios files are (one row a minute): an
        # earlier minute is rejected, not sorted, since such a file is damaged or not a
        # Helios series, and sorting would hide that; a minute twice is rejected too
        # (which row would hold its demand?), as evaluate and replay reject it.
        if last is not None and ts < last[0]:
            raise fail(f"time {shown(text)} is before the previous row's ({shown(last[1])})", line)
        if last is not None and ts == last[0]:
            raise fail(f"time {shown(text)} is line {last[2]}'s too; keep one of them", line)
        last = (ts, text, line)
        if first_ts is None:
            first_ts = ts
        running, pending, total, run8, pend8 = (
            gpu_count(row[i], c, line, fail) for i, c in zip(at[1:], COLUMNS[1:], strict=True)
        )
        # Not checked per row: running above total (a VC that borrows beyond its own GPUs,
        # which a cluster with lending would record), and the >= 8-GPU columns against
        # running/pending (a few minutes of the real series count more of them; checked
        # over the series below).
        d = running + pending
        h = ts // 3600
        if h != hour and n:
            hours.append(acc / n)
            acc, n = 0.0, 0
            # hours without a row hold the last hour's demand, so later hours keep their
            # time; a gap of over a year is not a minute series
            skipped = int(h - hour - 1) if hour is not None else 0
            if skipped > MAX_GAP_HOURS:
                raise fail(f"time jumps {skipped + 1} hours after the previous row's", line)
            hours.extend([hours[-1]] * skipped)
        hour = h
        acc, n = acc + d, n + 1
        totals.append(total)
        big += run8 + pend8
        allg += d
    if n:
        hours.append(acc / n)
    if not totals:
        raise UsageError(f"{name}:1: no rows")
    if big > allg:  # a share above 1 would make the small jobs' share negative
        raise UsageError(
            f"{name}: demand of jobs of >= 8 GPUs ({big:g} GPU-minutes) exceeds all demand "
            f"({allg:g} GPU-minutes) over the series"
        )
    nodes = max(1, math.ceil(statistics.median(totals) / node_gpus))
    first_hour = int(first_ts // 3600) if first_ts is not None else 0
    return VcSeries(nodes, hours, big / allg if allg else 0.0, first_hour)


def read_vc_file(path: Path, node_gpus: int = 8) -> VcSeries:
    """:func:`read_vc_series` of a ``.csv`` or ``.csv.gz`` file; a file that cannot be read
    (a folder, not gzip, cut short) is a :class:`UsageError` naming it."""
    try:
        with open_text(path) as fh:  # a byte that is not UTF-8 is named by its line
            return read_vc_series(fh, str(path), node_gpus)
    except (OSError, EOFError, zlib.error) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UsageError(f"{path}: cannot read: {reason}") from None


def _aligned(every: list[tuple[str, VcSeries]], folder: Path) -> list[tuple[str, VcSeries]]:
    """The series on one clock: hour 0 is the first hour of the earliest series, and a
    series that starts later has no demand before its first row."""
    start = min(series.first_hour for _, series in every)
    out = []
    for tenant, series in every:
        late = series.first_hour - start
        if late > MAX_GAP_HOURS:
            raise UsageError(
                f"{folder}: VC {tenant}'s series starts {late} hours after the earliest one "
                "(over a year)"
            )
        out.append((tenant, replace(series, hourly_demand=[0.0] * late + series.hourly_demand)))
    return out


def generate(
    folder: str | Path, settings: SyntheticSettings | None = None
) -> tuple[list[JobRecord], dict[str, int]]:
    """Jobs (seconds, sorted by submit) and VC sizes in nodes, for every VC file in ``folder``.

    The first ``settings.days`` of every series; more days than the longest series holds
    are a :class:`UsageError` that says how many days it holds."""
    s = settings or SyntheticSettings()
    if not Path(folder).is_dir():
        what = "is a file, not a folder" if Path(folder).exists() else "no such folder"
        raise UsageError(f"{folder}: {what} (--helios takes the folder of the Helios VC series)")
    files = sorted(f for f in Path(folder).glob("vc*") if f.name.endswith(CSV_SUFFIXES))
    if not files:
        raise UsageError(f"{folder}: no Helios VC series (vc*.csv or vc*.csv.gz)")
    rng = np.random.default_rng(s.seed)
    sigma = math.sqrt(2 * math.log(s.duration_mean_s / s.duration_median_s))
    mu = math.log(s.duration_median_s)
    sample = np.minimum(rng.lognormal(mu, sigma, 200_000), s.max_duration_s)
    mean_d = float(sample.mean())  # the cut lowers the mean: rates use the real one
    seen: dict[str, Path] = {}
    for f in files:
        tenant = f.name.split(".")[0]
        if tenant in seen:  # vcA.csv beside vcA.csv.gz: the VC would count twice
            raise UsageError(f"{folder}: VC {tenant} is in two files: {seen[tenant]} and {f}")
        seen[tenant] = f
    every = [(tenant, read_vc_file(f, s.node_gpus)) for tenant, f in seen.items()]
    every = _aligned(every, Path(folder))
    longest = max(len(series.hourly_demand) for _, series in every)
    if not s.days * 24 < longest + 1:  # whole hours, as the slice below takes them
        raise UsageError(
            f"{folder}: {days_text(s.days)} asked for, but the Helios series cover only "
            f"{days_text(longest / 24)}"
        )
    hours = int(s.days * 24)
    jobs: list[JobRecord] = []
    sizes: dict[str, int] = {}
    for tenant, series in every:
        sizes[tenant] = series.nodes
        for kind, share, table in (
            ("s", 1 - series.large_share, s.small_sizes),
            ("l", series.large_share, s.large_sizes),
        ):
            g = np.array([x for x, _ in table])
            p = np.array([w for _, w in table]) / sum(w for _, w in table)
            per_job = float((g * p).sum()) * mean_d
            for h, demand in enumerate(series.hourly_demand[:hours]):
                k = rng.poisson(demand * share * 3600.0 / per_job)
                for t, gpus, d in zip(
                    rng.uniform(0, 3600, k),
                    rng.choice(g, k, p=p),
                    np.minimum(rng.lognormal(mu, sigma, k), s.max_duration_s),
                    strict=True,
                ):
                    jobs.append(
                        JobRecord(
                            f"{tenant}-{kind}{len(jobs)}",
                            tenant,
                            min(int(gpus), series.nodes * s.node_gpus),
                            h * 3600.0 + float(t),
                            max(1.0, float(d)),
                            "",
                            0,
                        )
                    )
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs, sizes
