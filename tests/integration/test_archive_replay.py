"""Archive then replay on a real broker: a synthetic run processed live (windows A),
archived with ``dprobe archive``, replayed with ``dprobe replay --format dprobe-parquet
--speed 0`` into fresh topics and processed by a fresh worker (windows B): A == B. And the
scheduler's reports on the cluster topic: archived with ``--until-end`` and replayed onto
the fresh prefix's cluster topic byte for byte."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe import schema
from dprobe.sinks.parquet_archive import list_files
from dprobe.traces.archive_reader import count_records
from tests.streams.helpers import (
    assert_window_matches,
    closing_snapshots,
    consume,
    consume_all,
    create_worker_topics,
    make_snapshots,
    produce,
    reference_windows,
    snapshot_records,
    worker_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WINDOW_S = 10.0
T0 = 1_700_000_000.0


def _cli(bootstrap: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "dprobe.cli", "--bootstrap", bootstrap, *args]


def _env(prefix: str) -> dict[str, str]:
    return {**os.environ, "DPROBE_KAFKA_TOPIC_PREFIX": prefix}


async def _windows(
    bootstrap: str, prefix: str, tmp: Path, name: str, expected: int
) -> dict[tuple[str, float], schema.TenantWindow]:
    with worker_process(
        bootstrap,
        prefix=prefix,
        app_id=f"worker-{name}-{uuid.uuid4().hex[:6]}",
        data_dir=tmp / f"w-{name}",
        window_s=WINDOW_S,
        log=tmp / f"worker-{name}.log",
    ) as proc:
        await consume(bootstrap, f"{prefix}features", until=expected, timeout_s=150)
        await asyncio.sleep(2)  # anything extra (a duplicate) would arrive now
        raws = await consume_all(bootstrap, f"{prefix}features")
        assert proc.poll() is None, (tmp / f"worker-{name}.log").read_text()[-2000:]
    out: dict[tuple[str, float], schema.TenantWindow] = {}
    for raw in raws:
        w = schema.decode_window(raw)
        assert out.setdefault((w.tenant, w.window_start), w) == w, (
            "a window came out twice, differing"
        )
    return out


async def test_replayed_archive_yields_the_same_windows(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    live, again = f"live{tag}.", f"again{tag}."
    await create_worker_topics(kafka_bootstrap, live)
    await create_worker_topics(kafka_bootstrap, again)
    snaps = make_snapshots(hosts=3, ticks=40, t0=T0, seed=11)
    # Job events before the first snapshot: pending/running GPUs from the scheduler.
    jobs = [
        schema.JobEvent(ts=T0 - 5, event="submit", job="q1", tenant="vc-a", gpus=8, model="gpt"),
        schema.JobEvent(ts=T0 - 4, event="submit", job="r1", tenant="vc-b", gpus=4),
        schema.JobEvent(ts=T0 - 3, event="start", job="r1", tenant="vc-b", gpus=4),
    ]
    await produce(
        kafka_bootstrap, f"{live}jobs", [(e.job.encode(), schema.encode(e)) for e in jobs]
    )
    records = snapshot_records(snaps + closing_snapshots(snaps))
    await produce(kafka_bootstrap, f"{live}samples", records)
    ref = reference_windows(snaps, WINDOW_S)
    last = max(start for _, start in ref)

    # A: the live run
    every = await _windows(kafka_bootstrap, live, tmp_path, "a", len(ref) + 2)
    every = {k: w for k, w in every.items() if k[1] <= last}  # the closing tail is not compared
    # before the first snapshot, the job tenants' windows come from their job books alone
    before = {k: w for k, w in every.items() if k[1] < T0}
    assert set(before) == {("vc-a", T0 - WINDOW_S), ("vc-b", T0 - WINDOW_S)}
    assert before[("vc-a", T0 - WINDOW_S)].pending_gpus == 8.0
    assert before[("vc-b", T0 - WINDOW_S)].running_gpus == 4.0
    a = {k: w for k, w in every.items() if k[1] >= T0}
    assert set(a) == set(ref)
    for key, w in a.items():  # the reference knows no jobs: take their pending GPUs out
        plain = w.effective_demand_gpus - w.pending_gpus
        assert_window_matches(
            msgspec.structs.replace(w, effective_demand_gpus=plain), ref[key], WINDOW_S
        )
    assert a[("vc-a", T0)].pending_gpus == 8.0 and a[("vc-b", T0)].running_gpus >= 4.0

    # archive the live topics; SIGTERM once everything is on disk: a clean exit
    out = tmp_path / "archive"
    archive = await asyncio.create_subprocess_exec(
        *_cli(kafka_bootstrap, "archive", "--out", str(out), "--group-id", f"ar-{tag}"),
        "--flush-interval",
        "1",
        env=_env(live),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        for _ in range(120):
            files = list(list_files(out))
            if files and count_records(files) >= len(records) + len(jobs):
                break
            await asyncio.sleep(0.5)
        archive.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(archive.communicate(), 30)
        assert archive.returncode == 0, err.decode()[-2000:]
    finally:
        if archive.returncode is None:
            archive.kill()
            await archive.wait()
    assert count_records(list(list_files(out))) == len(records) + len(jobs)

    # B: replay the archive into fresh topics, as fast as possible, and a fresh worker
    replay = await asyncio.create_subprocess_exec(
        *_cli(kafka_bootstrap, "replay", str(out), "--format", "dprobe-parquet"),
        "--prefix",
        again,
        "--speed",
        "0",
        "--no-progress",
        env=_env(again),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(replay.communicate(), 120)
    assert replay.returncode == 0, err.decode()[-2000:]
    assert f"replayed {len(records) + len(jobs)} records" in err.decode()
    b = await _windows(kafka_bootstrap, again, tmp_path, "b", len(ref) + 2)
    b = {k: w for k, w in b.items() if k[1] <= last}
    assert set(b) == set(every)
    assert b == every


async def _keyed(bootstrap: str, topic: str, until: int) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of the first ``until`` records of ``topic`` (it must exist)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    out: list[tuple[bytes | None, bytes]] = []
    async with consumer:
        for _ in range(60):
            if len(out) >= until:
                break
            batch = await consumer.getmany(timeout_ms=500)
            out += [(r.key, r.value) for records in batch.values() for r in records]
    return out


async def _run(bootstrap: str, prefix: str, *args: str) -> str:
    """Run one dprobe command with ``prefix`` as its topic prefix; its stderr (exit 0)."""
    proc = await asyncio.create_subprocess_exec(
        *_cli(bootstrap, *args),
        env=_env(prefix),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return err.decode()


async def test_archived_cluster_reports_are_replayed_byte_for_byte(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    live, again = f"clive{tag}.", f"cagain{tag}."
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:  # the cluster topic as dprobe cluster publish creates it (jobs never exists)
        await admin.create_topics(
            [
                NewTopic(f"{live}samples", 2, 1),
                NewTopic(f"{live}cluster", 1, 1, topic_configs={"cleanup.policy": "compact"}),
            ]
        )
    finally:
        await admin.close()
    snaps = make_snapshots(hosts=2, ticks=5, t0=T0, seed=3)
    first = schema.ClusterReport(
        ts=T0, source="kueue", capacity_gpus=64, quotas={"vc-a": 40, "vc-b": 24}, complete=True
    )
    reports = [
        (b"kueue", schema.encode(first)),
        (b"ops", b'{"source": "ops", "v": 1, "ts": 1700000002.5, "quotas": {"vc-c": 8}}'),
    ]
    await produce(kafka_bootstrap, f"{live}cluster", reports)
    await produce(kafka_bootstrap, f"{live}samples", snapshot_records(snaps))

    out = tmp_path / "archive"
    err = await _run(
        kafka_bootstrap,
        live,
        "archive",
        "--out",
        str(out),
        "--group-id",
        f"ar-{tag}",
        "--until-end",
    )
    assert f"archived {len(snaps) + 2} records" in err
    assert [f.path.name for f in list_files(out, "cluster")] == ["cluster-p0-o0-o1.parquet"]

    replay = ("replay", str(out), "--format", "dprobe-parquet", "--prefix", again, "--speed", "0")
    err = await _run(kafka_bootstrap, again, *replay, "--no-progress")
    assert f"replayed {len(snaps) + 2} records" in err
    assert await _keyed(kafka_bootstrap, f"{again}cluster", 2) == reports
    got = await _keyed(kafka_bootstrap, f"{again}samples", len(snaps))
    assert sorted(got) == sorted(snapshot_records(snaps))
