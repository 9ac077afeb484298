"""The stream worker on a real broker: windows equal a plain-Python reference, survive
SIGKILL, and garbage goes to the dead-letter topic while valid traffic is still counted."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import signal
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from dprobe import schema
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


def _setup(kafka_bootstrap: str) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"t{tag}.", f"worker-{tag}"


def _expected(snaps: list[schema.HostSnapshot]) -> dict[tuple[str, float], dict]:
    return reference_windows(snaps, WINDOW_S)


def _by_key(raws: list[bytes]) -> dict[tuple[str, float], list[schema.TenantWindow]]:
    out: dict[tuple[str, float], list[schema.TenantWindow]] = {}
    for raw in raws:
        w = schema.decode_window(raw)
        out.setdefault((w.tenant, w.window_start), []).append(w)
    return out


def _check(
    got: dict[tuple[str, float], list[schema.TenantWindow]], ref: dict, *, check_lost: bool = True
) -> None:
    """Windows equal the reference, except those the closing tail also falls into."""
    tail_start = max(k[1] for k in ref)  # the tail begins after the last data snapshot
    ref = {k: v for k, v in ref.items() if k[1] < tail_start}
    got = {k: v for k, v in got.items() if k[1] < tail_start}
    assert len({k[1] for k in ref}) >= 3
    assert set(got) == set(ref), (sorted(set(ref) - set(got)), sorted(set(got) - set(ref)))
    for key, windows in got.items():
        first = windows[0]
        assert all(w == first for w in windows), f"duplicates of {key} differ"
        assert_window_matches(first, ref[key], WINDOW_S, check_lost=check_lost)


async def _windows_until(
    bootstrap: str, topic: str, want: set[tuple[str, float]], *, timeout_s: float
) -> list[bytes]:
    """Every record of ``topic`` from its start, read until each window of ``want`` has
    arrived (or the time is up), then 2 s more, so that a window emitted twice shows.

    One reader for the whole wait: a window emitted twice does not count as another
    window (it did with a count of records), and no second read can come back early."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    out: list[bytes] = []
    seen: set[tuple[str, float]] = set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    settle: float | None = None
    async with consumer:
        while loop.time() < (deadline if settle is None else settle):
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for r in records:
                    w = schema.decode_window(r.value)
                    seen.add((w.tenant, w.window_start))
                    out.append(r.value)
            if settle is None and want <= seen:
                settle = loop.time() + 2.0
    return out


async def test_windows_equal_plain_python_reference(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix, app_id = _setup(kafka_bootstrap)
    await create_worker_topics(kafka_bootstrap, prefix)
    snaps = make_snapshots(hosts=3, ticks=60, t0=T0)
    # Duplicates (a collector resending after an outage) must not be counted twice.
    dupes = random.Random(3).sample(snaps, 20)
    await produce(
        kafka_bootstrap,
        f"{prefix}samples",
        snapshot_records(snaps + dupes + closing_snapshots(snaps)),
    )
    ref = _expected(snaps)
    assert len({k[0] for k in ref}) == 4 and len({k[1] for k in ref}) == 6
    with worker_process(
        kafka_bootstrap,
        prefix=prefix,
        app_id=app_id,
        data_dir=tmp_path / "w",
        window_s=WINDOW_S,
        log=tmp_path / "worker.log",
    ) as proc:
        raws = await consume(kafka_bootstrap, f"{prefix}features", until=len(ref), timeout_s=120)
        await asyncio.sleep(2)  # anything extra (a duplicate) would arrive now
        raws = await consume_all(kafka_bootstrap, f"{prefix}features")
        assert proc.poll() is None
    _check(_by_key(raws), ref)
    assert "\x1b[" not in (tmp_path / "worker.log").read_text()  # no terminal codes in logs


async def test_sigkill_mid_window_then_restart_loses_and_double_counts_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix, app_id = _setup(kafka_bootstrap)
    await create_worker_topics(kafka_bootstrap, prefix)
    snaps = make_snapshots(hosts=3, ticks=80, t0=T0, seed=5)
    ref = _expected(snaps)
    half = len(snaps) // 2
    await produce(kafka_bootstrap, f"{prefix}samples", snapshot_records(snaps[:half]))
    log = tmp_path / "worker.log"
    with worker_process(
        kafka_bootstrap,
        prefix=prefix,
        app_id=app_id,
        data_dir=tmp_path / "w",
        window_s=WINDOW_S,
        log=log,
    ) as proc:
        first = await consume(kafka_bootstrap, f"{prefix}features", until=4, timeout_s=90)
        assert first, "no window before the kill"
        # Keep traffic flowing while the worker dies mid-window.
        await produce(
            kafka_bootstrap, f"{prefix}samples", snapshot_records(snaps[half : half + 30])
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    await produce(
        kafka_bootstrap,
        f"{prefix}samples",
        snapshot_records(snaps[half + 30 :] + closing_snapshots(snaps)),
    )
    with worker_process(
        kafka_bootstrap,
        prefix=prefix,
        app_id=app_id,
        data_dir=tmp_path / "w",
        window_s=WINDOW_S,
        log=log,
    ) as proc:
        # Wait for the windows themselves, not a count of records: after SIGKILL the new
        # worker may emit again (identically) a window the killed one had emitted, and
        # the restarted worker's windows come ~100 s after its start (the dead member's
        # session, then the empty samples partition's idle time).
        raws = await _windows_until(kafka_bootstrap, f"{prefix}features", set(ref), timeout_s=300)
        assert proc.poll() is None
    _check(_by_key(raws), ref)


def _garbage(rng: random.Random, valid: bytes, i: int) -> tuple[bytes, str]:
    """One invalid record of a random kind, with the dead-letter reason it must get."""
    doc = json.loads(valid)
    kind = i % 9
    if kind == 7:  # invalid UTF-8 in a string: once a crash of the worker on every restart
        return valid.replace(b'"host":"', b'"host":"\xff\xfe', 1), "malformed_json"
    if kind == 8:  # an unknown field nested past the decoder's recursion limit
        deep = b"[" * 100_000 + b"]" * 100_000
        return valid[:-1] + b',"extra":' + deep + b"}", "malformed_json"
    if kind == 0:
        return b"\xff" + rng.randbytes(rng.randrange(1, 64)), "malformed_json"
    if kind == 1:
        doc["seq"] = "seven"
        return json.dumps(doc).encode(), "invalid_field"
    if kind == 2:
        doc["gpus"][0]["mem_used"] = 10**30
        return json.dumps(doc).encode(), "invalid_field"
    if kind == 3:
        doc["gpus"][0]["util"] = float("nan")
        return json.dumps(doc).encode(), "invalid_field"
    if kind == 4:
        doc["v"] = 7
        return json.dumps(doc).encode(), "unknown_version"
    if kind == 5:
        return valid[: rng.randrange(1, len(valid) - 1)], "malformed_json"
    doc["procs"] = [{"pid": -1}]
    return json.dumps(doc).encode(), "invalid_field"


async def test_garbage_goes_to_deadletter_and_valid_traffic_is_still_counted(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix, app_id = _setup(kafka_bootstrap)
    await create_worker_topics(kafka_bootstrap, prefix)
    snaps = make_snapshots(hosts=3, ticks=40, t0=T0, seed=9)
    ref = _expected(snaps)
    rng = random.Random(11)
    records: list[tuple[bytes | None, bytes]] = []
    expected_reasons: dict[str, int] = {}
    valid_records = snapshot_records(snaps)
    n_garbage = 10_000
    for i in range(n_garbage):
        raw, reason = _garbage(rng, valid_records[i % len(valid_records)][1], i)
        expected_reasons[reason] = expected_reasons.get(reason, 0) + 1
        records.append((b"host-x", raw))
    # Valid records in their per-host order, garbage scattered between them.
    positions = sorted(rng.sample(range(n_garbage + len(valid_records)), len(valid_records)))
    mixed: list[tuple[bytes | None, bytes]] = []
    g = iter(records)
    v = iter(valid_records)
    pos = set(positions)
    for k in range(n_garbage + len(valid_records)):
        mixed.append(next(v) if k in pos else next(g))
    await produce(
        kafka_bootstrap, f"{prefix}samples", mixed + snapshot_records(closing_snapshots(snaps))
    )
    with worker_process(
        kafka_bootstrap,
        prefix=prefix,
        app_id=app_id,
        data_dir=tmp_path / "w",
        window_s=WINDOW_S,
        log=tmp_path / "worker.log",
    ) as proc:
        dead = await consume(kafka_bootstrap, f"{prefix}deadletter", until=n_garbage, timeout_s=180)
        raws = await consume(kafka_bootstrap, f"{prefix}features", until=len(ref), timeout_s=60)
        await asyncio.sleep(2)
        raws = await consume_all(kafka_bootstrap, f"{prefix}features")
        assert proc.poll() is None, "the worker died"
    assert len(dead) == n_garbage
    letters = [schema.decode(r, schema.DeadLetter) for r in dead]
    reasons: dict[str, int] = {}
    for dl in letters:
        reasons[dl.reason] = reasons.get(dl.reason, 0) + 1
        assert dl.source_topic == f"{prefix}samples" and dl.offset >= 0 and dl.error
    assert reasons == expected_reasons
    # dead letters keep the first 4,096 bytes of a record (the deep-nesting kind is longer)
    originals = {raw[:4096] for _, raw in records}
    assert all(base64.b64decode(dl.raw) in originals for dl in letters[:500])
    _check(_by_key(raws), ref)


async def test_two_workers_in_one_group_produce_the_same_windows_as_one(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix, app_id = _setup(kafka_bootstrap)
    await create_worker_topics(kafka_bootstrap, prefix)
    snaps = make_snapshots(hosts=6, ticks=50, t0=T0, seed=21)
    ref = _expected(snaps)
    await produce(
        kafka_bootstrap, f"{prefix}samples", snapshot_records(snaps + closing_snapshots(snaps))
    )
    common = {"prefix": prefix, "app_id": app_id, "window_s": WINDOW_S}
    with (
        worker_process(
            kafka_bootstrap, data_dir=tmp_path / "w1", log=tmp_path / "w1.log", **common
        ) as one,
        worker_process(
            kafka_bootstrap, data_dir=tmp_path / "w2", log=tmp_path / "w2.log", **common
        ) as two,
    ):
        await consume(kafka_bootstrap, f"{prefix}features", until=len(ref), timeout_s=150)
        await asyncio.sleep(3)
        raws = await consume_all(kafka_bootstrap, f"{prefix}features")
        assert one.poll() is None and two.poll() is None
    _check(_by_key(raws), ref)
