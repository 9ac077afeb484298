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

import csv
import gzip
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from dprobe.errors import UsageError
from dprobe.traces.jobs_csv import JobRecord


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


def read_vc_series(fh: IO[str], name: str = "<series>", node_gpus: int = 8) -> VcSeries:
    """Size, hourly mean demand and large-job share of one Helios VC minute series."""
    reader = csv.DictReader(fh)
    totals, hours, big, allg = [], [], 0.0, 0.0
    acc, n, hour = 0.0, 0, None
    try:
        for row in reader:
            d = float(row["running_gpu_num"]) + float(row["pending_gpu_num"])
            h = row["time"][:13]
            if h != hour and n:
                hours.append(acc / n)
                acc, n = 0.0, 0
            hour = h
            acc, n = acc + d, n + 1
            totals.append(float(row["total_gpu_num"]))
            big += float(row["running_gpu_num_noless_8"]) + float(row["pending_gpu_num_noless_8"])
            allg += d
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{name}:{reader.line_num}: not a Helios VC series row ({exc})") from None
    if n:
        hours.append(acc / n)
    if not totals:
        raise UsageError(f"{name}:1: no rows")
    nodes = max(1, math.ceil(statistics.median(totals) / node_gpus))
    return VcSeries(nodes, hours, big / allg if allg else 0.0)


def generate(
    folder: str | Path, settings: SyntheticSettings | None = None
) -> tuple[list[JobRecord], dict[str, int]]:
    """Jobs (seconds, sorted by submit) and VC sizes in nodes, for every VC file in ``folder``.

    The first ``settings.days`` of every series; more days than the longest series holds
    are a :class:`UsageError` that says how many days it holds."""
    s = settings or SyntheticSettings()
    files = sorted(Path(folder).glob("vc*.csv*"))
    if not files:
        raise UsageError(f"{folder}: no Helios VC series (vc*.csv or vc*.csv.gz)")
    rng = np.random.default_rng(s.seed)
    sigma = math.sqrt(2 * math.log(s.duration_mean_s / s.duration_median_s))
    mu = math.log(s.duration_median_s)
    sample = np.minimum(rng.lognormal(mu, sigma, 200_000), s.max_duration_s)
    mean_d = float(sample.mean())  # the cut lowers the mean: rates use the real one
    every: list[tuple[str, VcSeries]] = []
    for f in files:
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt", encoding="utf-8", newline="") as fh:
            every.append((f.name.split(".")[0], read_vc_series(fh, str(f), s.node_gpus)))
    longest = max(len(series.hourly_demand) for _, series in every)
    if not s.days * 24 < longest + 1:  # whole hours, as the slice below takes them
        raise UsageError(
            f"{folder}: {s.days:g} days asked for, but the Helios series cover only "
            f"{longest / 24:g} days"
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
