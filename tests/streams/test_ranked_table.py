"""Restoring the host-state table never puts a host back to an older state.

A stalled former owner can write a host's state after the new owner wrote newer ones
(seen on the real broker in the stalled-owner failover test: ``..., 176, 62, 209``).
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust

from dprobe.config import WorkerSettings
from dprobe.streams import codec
from dprobe.streams.ranked_table import RankedTable, add_ranked_table, advancing, offset_rank
from tests.streams.helpers import unstarted_worker_app


def _record(key: bytes, off: int | None, seq: int = 0, partition: int = 0) -> Any:
    state: dict[str, Any] = {"seq": seq}
    if off is not None:
        state["off"] = off
    value = codec.dumps(state)
    return SimpleNamespace(
        key=key, value=value, message=SimpleNamespace(value=value, partition=partition)
    )


def _tombstone(key: bytes) -> Any:
    return SimpleNamespace(key=key, value=None, message=SimpleNamespace(value=None, partition=0))


def _applied(batch: list[Any], start: dict[bytes, bytes]) -> dict[bytes, bytes | None]:
    table: dict[bytes, bytes | None] = dict(start)
    for e in advancing(batch, start.get, offset_rank):
        table[e.key] = e.value
    return table


def test_with_ranks_everywhere_each_key_ends_at_its_highest_rank() -> None:
    rng = random.Random(7)
    keys = [b"h0", b"h1", b"h2"]
    for _ in range(300):
        start = {k: _record(k, rng.randrange(50)).value for k in keys if rng.random() < 0.5}
        picks = rng.choices(keys, k=12)
        batch = [_record(k, rng.randrange(100), seq=i) for i, k in enumerate(picks)]
        got = _applied(batch, start)
        for key in keys:
            # reference: the highest rank wins; among equal ranks, the last one written
            # (the value already in the table counts as written first)
            candidates = [(offset_rank(start[key]), -1, start[key])] if key in start else []
            candidates += [(offset_rank(e.value), i, e.value) for i, e in enumerate(batch)
                           if e.key == key]  # fmt: skip
            if candidates:
                assert got[key] == max(candidates, key=lambda c: (c[0], c[1]))[2]
            else:
                assert key not in got


def test_unranked_values_and_tombstones_apply_in_log_order() -> None:
    start = {b"old": _record(b"old", 10).value}
    batch = [
        _record(b"old", None, seq=1),  # an earlier version's write: last one wins
        _record(b"old", 3, seq=2),  # replaces an unranked value
        _record(b"gone", 9),
        _tombstone(b"gone"),
        _record(b"gone", 2, seq=3),  # after a tombstone, any rank is new
        _record(b"new", 5, seq=4),
        _record(b"new", 4, seq=5),  # dropped: older than what it would replace
    ]
    got = _applied(batch, start)
    assert codec.loads(got[b"old"]) == {"seq": 2, "off": 3}
    assert codec.loads(got[b"gone"]) == {"seq": 3, "off": 2}
    assert codec.loads(got[b"new"]) == {"seq": 4, "off": 5}
    assert offset_rank(b"not msgpack or json \xff") is None


def test_a_faust_table_restores_the_newest_state_of_each_host() -> None:
    app = faust.App("ranked-table-test", store="memory://")
    table = add_ranked_table(app, "hosts")
    # the changelog as a worker that took over and a stalled former owner wrote it
    log = [_record(b"host-1", o, seq=o) for o in (72, 119, 144, 208)]
    log += [_record(b"host-1", 62, seq=62), _record(b"host-2", 61, seq=61)]
    table.apply_changelog_batch(log[:3])
    table.apply_changelog_batch(log[3:])  # restores come in batches
    assert codec.loads(table.data[b"host-1"])["seq"] == 208
    assert codec.loads(table.data[b"host-2"])["seq"] == 61


def test_the_worker_restores_its_host_and_window_tables_by_rank(tmp_path: Path) -> None:
    with unstarted_worker_app(WorkerSettings(data_dir=tmp_path)) as built:
        tables = built.app.tables
        assert isinstance(tables["hosts"], RankedTable)
        assert isinstance(tables["windows"], RankedTable)
