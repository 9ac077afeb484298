"""A ``dprobe.samples`` record not keyed by its snapshot's host (another host's name, or no
key) breaks the topic's contract: with several workers a host's snapshots would land on
several partitions and their sequence tracking. A real worker on a real broker sends each
such record to the dead-letter topic with reason ``wrong_key``, and the windows are
those of the rightly keyed snapshots alone (a plain-Python reference)."""

from __future__ import annotations

import asyncio
import base64
import random
import time
import uuid
from pathlib import Path

import msgspec
import pytest

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


async def test_a_sample_keyed_otherwise_than_its_host_is_a_dead_letter(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"t{tag}.", f"worker-{tag}"
    await create_worker_topics(kafka_bootstrap, prefix)
    snaps = make_snapshots(hosts=3, ticks=40, t0=T0, seed=4)
    # a host whose snapshots come under another host's key, or none
    stray = [
        msgspec.structs.replace(s, host="host-stray")
        for s in make_snapshots(hosts=1, ticks=40, t0=T0, seed=5)
    ]
    keys = [b"host-0", None, b"host-stray ", b"\xff"]
    wrong = [(keys[i % len(keys)], schema.encode(s)) for i, s in enumerate(stray)]
    rng = random.Random(6)
    mixed = snapshot_records(snaps)
    for record in wrong:
        mixed.insert(rng.randrange(len(mixed) + 1), record)
    await produce(
        kafka_bootstrap, f"{prefix}samples", mixed + snapshot_records(closing_snapshots(snaps))
    )
    ref = reference_windows(snaps, WINDOW_S)  # the rightly keyed snapshots only
    tail_start = max(k[1] for k in ref)  # windows the closing tail falls into are left out
    with worker_process(
        kafka_bootstrap,
        prefix=prefix,
        app_id=app_id,
        data_dir=tmp_path / "w",
        window_s=WINDOW_S,
        log=tmp_path / "worker.log",
    ) as proc:
        dead = await consume(kafka_bootstrap, f"{prefix}deadletter", until=len(wrong))
        want = {k for k in ref if k[1] < tail_start}
        deadline = time.monotonic() + 120
        while True:  # until every window before the closing tail is out, then 2 s more
            raws = await consume_all(kafka_bootstrap, f"{prefix}features")
            seen = {(w.tenant, w.window_start) for w in map(schema.decode_window, raws)}
            if want <= seen or time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
        await asyncio.sleep(2)  # a window sent twice, or one of the stray host, shows
        raws = await consume_all(kafka_bootstrap, f"{prefix}features")
        assert proc.poll() is None, "the worker died"
    letters = [schema.decode(r, schema.DeadLetter) for r in dead]
    assert len(letters) == len(wrong)
    assert {dl.reason for dl in letters} == {"wrong_key"}
    assert sorted(base64.b64decode(dl.raw) for dl in letters) == sorted(v for _, v in wrong)
    assert any("has no key" in dl.error for dl in letters)
    assert any("record key 'host-0' is not its host 'host-stray'" in dl.error for dl in letters)
    got: dict[tuple[str, float], list[schema.TenantWindow]] = {}
    for raw in raws:
        w = schema.decode_window(raw)
        got.setdefault((w.tenant, w.window_start), []).append(w)
    ref = {k: v for k, v in ref.items() if k[1] < tail_start}
    got = {k: v for k, v in got.items() if k[1] < tail_start}
    assert set(got) == set(ref)
    for key, windows in got.items():
        assert all(w == windows[0] for w in windows), f"duplicates of {key} differ"
        assert_window_matches(windows[0], ref[key], WINDOW_S)
