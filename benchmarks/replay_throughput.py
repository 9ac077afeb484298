"""Replay throughput: records per second from a Parquet archive into the broker.

Builds an archive of realistic HostSnapshots (the synthetic collector backend: 8-GPU
hosts with up to 2 processes per GPU, saturated) with the archive writer, then replays it
with ``--speed max`` (idempotent producer, acks=all, zstd, delivery awaited) into a fresh
topic per run (4 partitions, created before the clock starts; reading the Parquet files,
producing and awaiting delivery are timed). Prints each run and the median. Uses
``KAFKA_BOOTSTRAP`` when set, else starts a local broker on free ports (Java 17 + Maven,
see infra/kafka) and stops it after.

    .venv/bin/python benchmarks/replay_throughput.py [--hosts 50] [--ticks 200] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._counts import at_least
from dprobe import schema
from dprobe.broker import LocalBroker
from dprobe.collectors.snapshot import SnapshotBuilder
from dprobe.collectors.synthetic import SyntheticBackend
from dprobe.config import BrokerSettings, KafkaSettings, ReplaySettings
from dprobe.count_text import count_of
from dprobe.errors import UsageError
from dprobe.sinks.archive_schema import row_of
from dprobe.sinks.parquet_archive import ArchiveWriter
from dprobe.traces.archive_reader import archive_files, count_records, read_archive
from dprobe.traces.replay_kafka import ensure_topics, replay_to_kafka, topics_for

T0 = 1_780_000_000.0


def build_archive(out: Path, hosts: int, ticks: int) -> tuple[int, int]:
    """``hosts`` x ``ticks`` 10-second snapshots archived under ``out``; (records, bytes)."""
    writer = ArchiveWriter(out, fsync=False)
    backends = [
        SyntheticBackend(host=f"bench-{h:03d}", seed=h, saturate=True, procs_per_gpu=2)
        for h in range(hosts)
    ]
    builders = [
        SnapshotBuilder(b.host, resolver=None, on_fault=lambda _kind: None) for b in backends
    ]
    offsets = [0, 0, 0, 0]
    size = 0
    for tick in range(ticks):
        ts = T0 + 10.0 * tick
        for h, (backend, build) in enumerate(zip(backends, builders, strict=True)):
            snap = build(backend.read_at(ts), seq=tick, ts=ts, interval_s=10.0)
            value = schema.encode(snap)
            size += len(value)
            part = h % 4
            writer.add(
                "samples",
                row_of(
                    "samples",
                    snap,
                    key=snap.host.encode(),
                    value=value,
                    partition=part,
                    offset=offsets[part],
                    timestamp_ms=None,
                ),
            )
            offsets[part] += 1
    writer.flush()
    return writer.records_written, size


async def one_run(archive: Path, bootstrap: str) -> tuple[int, float]:
    prefix = f"bench{uuid.uuid4().hex[:8]}."
    settings = ReplaySettings(kafka=KafkaSettings(bootstrap=bootstrap), topic_prefix=prefix)
    topics = topics_for(settings)  # every kind the replay writes: samples, jobs, cluster
    files = archive_files(archive)
    await ensure_topics(  # not timed: topic creation, as the replay itself creates them
        settings, sorted(topics.values()), compacted={topics["cluster"]}, samples=topics["samples"]
    )
    await asyncio.sleep(1.0)  # let the new partitions elect their leader
    t0 = time.perf_counter()
    stats = await replay_to_kafka(read_archive(archive, files), settings, topics)
    return stats.records, time.perf_counter() - t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    at_least(ap, args, "--hosts", "--ticks", "--runs")

    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    with tempfile.TemporaryDirectory(prefix="dprobe-bench-") as tmp:
        if not bootstrap:
            broker = LocalBroker(
                BrokerSettings(
                    port=_free_port(), controller_port=_free_port(), state_dir=Path(tmp) / "broker"
                )
            )
            broker.start()
            bootstrap = broker.bootstrap
        try:
            archive = Path(tmp) / "archive"
            records, size = build_archive(archive, args.hosts, args.ticks)
            on_disk = sum(f.path.stat().st_size for f in archive_files(archive))
            assert count_records(archive_files(archive)) == records
            print(
                f"archive: {records} snapshots, {size / 1e6:.1f} MB of JSON, "
                f"{on_disk / 1e6:.1f} MB of Parquet; broker {bootstrap}",
                file=sys.stderr,
            )
            rates = []
            for run in range(args.runs):
                try:
                    n, secs = asyncio.run(one_run(archive, bootstrap))
                except UsageError as exc:  # cannot reach Kafka at KAFKA_BOOTSTRAP: exit 2
                    ap.exit(2, f"{ap.prog}: {exc}\n")
                assert n == records
                rates.append(n / secs)
                print(f"run {run + 1}: {n} records in {secs:.2f} s = {n / secs:,.0f} records/s")
            print(
                f"replay throughput (Parquet -> Kafka, speed max, acks=all, zstd): "
                f"median {statistics.median(rates):,.0f} records/s "
                f"over {count_of(args.runs, 'run')} "
                f"({statistics.median(rates) * size / records / 1e6:.1f} MB/s of JSON)"
            )
        finally:
            if broker is not None:
                broker.stop()


if __name__ == "__main__":
    main()
