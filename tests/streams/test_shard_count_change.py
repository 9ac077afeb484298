"""The window stage's shard counts (``window_host_shards``, ``tenant_index_shards``) may
change between two runs of a partition's owner: a worker restarted with other counts, or
a rolling restart that moves a partition from a worker with the old counts to one with
the new, while windows are open (under live traffic one always is). The windows it emits
are those of a run that never changed them: no tenant's window lost, no host's samples
dropped or counted twice, also when records already applied are read again after the
restart (at-least-once)."""

from __future__ import annotations

import dataclasses

import pytest

from dprobe import schema
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.state.window_agg import WindowSettings
from dprobe.streams.windows import Windows
from tests.streams.helpers import (
    assert_window_matches,
    closing_snapshots,
    make_snapshots,
    reference_windows,
)
from tests.streams.test_batch_semantics import (
    WINDOW_S,
    FakeTable,
    FakeTopic,
    _by_window,
    _updates_log,
)

SNAPS = make_snapshots(hosts=7, ticks=35, seed=5)
ALL = SNAPS + closing_snapshots(SNAPS, seconds=15)


def _stage(features: FakeTopic, table: FakeTable, host_shards: int, index_shards: int) -> Windows:
    stats = WorkerStats()
    window = WindowSettings(window_s=WINDOW_S, grace_s=2.0)
    window = dataclasses.replace(window, host_shards=host_shards, index_shards=index_shards)
    return Windows(
        table=table,
        features_topic=features,
        window=window,
        stats=stats,
        sources=1,
        deadletter=DeadLetters(FakeTopic(), stats),
    )


@pytest.mark.parametrize(
    ("before", "after"),
    [((8, 64), (3, 2)), ((2, 1), (8, 64)), ((8, 64), (5, 7)), ((4, 4), (4, 4))],
)
@pytest.mark.parametrize(("cut", "replayed"), [(60, 0), (131, 17), (250, 40)])
async def test_windows_survive_a_restart_with_other_shard_counts(
    before: tuple[int, int], after: tuple[int, int], cut: int, replayed: int
) -> None:
    log = await _updates_log(ALL, 3)
    assert cut < len(log) - 50
    unchanged = FakeTopic()
    await _stage(unchanged, FakeTable(), *before).on_updates(log)
    expected = _by_window([value for _, _, value in unchanged.sent])

    features = FakeTopic()
    first = _stage(features, FakeTable(), *before)
    for i in range(0, cut, 9):
        await first.on_updates(log[i : min(i + 9, cut)])
    table = FakeTable.recovered(first.table.changelog, ranked=True)
    second = _stage(features, table, *after)
    rest = log[cut - replayed :]  # committed before `replayed` records: read again
    for i in range(0, len(rest), 9):
        await second.on_updates(rest[i : i + 9])
    got = _by_window([value for _, _, value in features.sent])
    assert got == expected
    index_shards = [int(key.rsplit(b"|i", 1)[1]) for key in table.data if b"|i" in key]
    assert all(k < after[1] for k in index_shards)  # no index shard left of the old count
    ref = reference_windows(ALL, WINDOW_S)
    assert set(reference_windows(SNAPS, WINDOW_S)) <= set(got)
    for key, raw in got.items():
        assert_window_matches(schema.decode_window(raw), ref[key], WINDOW_S)
