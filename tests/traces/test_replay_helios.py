"""A slice of a real Helios VC file replayed into a real broker: every message decodes and
each minute carries that minute's running and pending GPUs (needs DPROBE_TRACE_DIR)."""

from __future__ import annotations

import csv
import gzip
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from dprobe import schema
from dprobe.config import KafkaSettings, ReplaySettings
from dprobe.traces.demand_series import parse_ts
from dprobe.traces.replay_kafka import replay_to_kafka
from dprobe.traces.replay_sources import open_source
from tests.streams.helpers import consume

pytestmark = [pytest.mark.integration]
ROWS = 30


def _slice(src: Path, tmp: Path) -> tuple[list[dict[str, str]], Path]:
    """The first ROWS rows (header names lower-cased) and a temporary file holding them."""
    with gzip.open(src, "rt", newline="") as fh:
        lines = [fh.readline() for _ in range(ROWS + 1)]
    rows = [{k.strip().lower(): v for k, v in r.items()} for r in csv.DictReader(lines)]
    piece = tmp / src.name.removesuffix(".gz")  # same tenant name
    piece.write_text("".join(lines))
    return rows, piece


async def test_helios_slice_replayed_carries_the_demand(
    trace_dir: Path, kafka_bootstrap: str, tmp_path: Path
) -> None:
    rows, piece = _slice(trace_dir / "helios-earth-vcs" / "vc6YE.csv.gz", tmp_path)
    prefix = f"helios{uuid.uuid4().hex[:8]}."
    settings = ReplaySettings(kafka=KafkaSettings(bootstrap=kafka_bootstrap, topic_prefix=prefix))
    records, _ = open_source(piece, "helios-vc")
    stats = await replay_to_kafka(
        records, settings, {k: f"{prefix}{k}" for k in ("samples", "jobs", "cluster")}
    )
    assert stats.first_ts == parse_ts(rows[0]["time"])

    raw_samples = await consume(kafka_bootstrap, f"{prefix}samples", until=stats.by_kind["samples"])
    raw_jobs = await consume(kafka_bootstrap, f"{prefix}jobs", until=stats.by_kind["jobs"])
    assert len(raw_samples) == stats.by_kind["samples"] and len(raw_jobs) == stats.by_kind["jobs"]
    snaps = [schema.decode_snapshot(r) for r in raw_samples]
    jobs = sorted((schema.decode_job_event(r) for r in raw_jobs), key=lambda e: e.ts)

    running: dict[float, int] = defaultdict(int)
    gpus: dict[float, int] = defaultdict(int)
    for s in snaps:
        running[s.ts] += sum(1 for p in s.procs if p.tenant == "vc6YE")
        gpus[s.ts] += len(s.gpus)
    pending: dict[float, int] = {}
    level = None
    ev = iter(jobs)
    nxt = next(ev, None)
    for row in rows:
        ts = parse_ts(row["time"])
        while nxt is not None and nxt.ts <= ts:
            level, nxt = nxt.gpus, next(ev, None)
        pending[ts] = level  # type: ignore[assignment]
    for row in rows:
        ts = parse_ts(row["time"])
        assert running[ts] == int(row["running_gpu_num"]), row["time"]
        assert pending[ts] == int(row["pending_gpu_num"]), row["time"]
        assert gpus[ts] >= int(row["total_gpu_num"])  # the VC's fleet

    # the VC's real quota reaches the planner: one report per change of total_gpu_num
    raw_reports = await consume(kafka_bootstrap, f"{prefix}cluster", until=stats.by_kind["cluster"])
    reports = [schema.decode_cluster_report(r) for r in raw_reports]
    changes = []
    for row in rows:
        quota = (parse_ts(row["time"]), float(row["total_gpu_num"]))
        if not changes or changes[-1][1] != quota[1]:
            changes.append(quota)
    assert [(r.ts, r.quotas["vc6YE"]) for r in reports] == changes
    assert all(r.capacity_gpus == r.quotas["vc6YE"] and r.source == "replay" for r in reports)
