"""The window stage's partition state reads what older workers stored and writes it back
byte for byte, so a worker restarted on an old changelog carries on where it stopped."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.state.partition import PartitionState
from dprobe.streams.state.window_agg import Partial, WindowSettings
from dprobe.streams.windows import Windows

# As the window stage stored ``p|PARTITION`` before the state had a type: a plain dict
# created with these keys in this order, ``upto`` added once a progress was reported.
OLD_FORMAT = [
    b'{"max_ts":0.0,"closed_end":0.0,"open":{},"job_tenants":[],"sources":{}}',
    b'{"max_ts":1700.5,"closed_end":240.0,"open":{"vc-b":[250.0,260.0],"vc-a":[250.0]},'
    b'"job_tenants":["vc-a","vc-c"],"sources":{"1":262.0,"0":255.5},"upto":240.0}',
    b'{"max_ts":0.0,"closed_end":120.0,"open":{"vc-a":[180.0]},"job_tenants":[],'
    b'"sources":{"0":185.0},"upto":120}',  # a window_s given as an int made upto an int
]


def _core_of(raw: bytes) -> bytes:
    """The old stored form without its tenant index, as the new core keeps it."""
    plain = codec.loads(raw)
    plain.pop("open")
    plain.pop("job_tenants")
    return codec.dumps(plain)


def _unranked(data: dict[bytes, bytes]) -> dict[bytes, Any]:
    """Stored values without the restore rank the window stage adds (``"off"``)."""
    out = {}
    for key, raw in data.items():
        value = codec.loads(raw)
        if isinstance(value, dict):
            value.pop("off", None)
        out[key] = value
    return out


def _reloaded(ps: PartitionState) -> PartitionState:
    """``ps`` written in its stored form (core + every index shard) and read back."""
    index = []
    for k in range(ps.index_shards):
        data = ps.index_plain(k)
        raw = None if data is None else codec.dumps(data)
        index.append(None if raw is None else codec.loads(raw))
    core = codec.loads(codec.dumps(ps.to_plain()))
    return PartitionState.from_stored(core, index, index_shards=ps.index_shards)


@pytest.mark.parametrize("raw", OLD_FORMAT)
@pytest.mark.parametrize("shards", [1, 3, 64])
def test_an_old_format_state_is_kept_whole_in_the_new_form(raw: bytes, shards: int) -> None:
    plain = codec.loads(raw)
    old = PartitionState.from_stored(plain, index_shards=shards)
    # the numbers of the core are written back byte for byte (an int stays an int)
    assert codec.dumps(old.to_plain()) == _core_of(raw)
    new = _reloaded(old)
    assert new.open == plain["open"] and new.job_tenants == plain["job_tenants"]
    assert (new.max_ts, new.closed_end, new.sources, new.upto) == (
        old.max_ts, old.closed_end, old.sources, old.upto,
    )  # fmt: skip
    # the migrated index is marked for writing, so the next batch stores it as shards
    assert {k for k in range(shards) if old.index_plain(k) is not None} <= old.dirty


def test_the_state_of_a_fresh_partition_is_stored_as_before() -> None:
    assert codec.dumps(PartitionState.from_plain(None).to_plain()) == _core_of(OLD_FORMAT[0])


def test_the_typed_state_reads_the_old_fields() -> None:
    ps = PartitionState.from_plain(codec.loads(OLD_FORMAT[1]))
    assert ps.open == {"vc-b": [250.0, 260.0], "vc-a": [250.0]}
    assert ps.sources == {"1": 262.0, "0": 255.5}
    assert (ps.max_ts, ps.closed_end, ps.upto, ps.out_before) == (1700.5, 240.0, 240.0, 240.0)
    assert ps.job_tenants == ["vc-a", "vc-c"]


def test_changing_the_state_leaves_the_data_it_was_read_from_alone() -> None:
    plain = codec.loads(OLD_FORMAT[1])
    ps = PartitionState.from_plain(plain)
    ps.open_window("vc-a", 270.0)
    ps.note_source(0, 300.0)
    ps.close(250.0, end=260.0)
    assert plain == codec.loads(OLD_FORMAT[1])


class _Table:
    key_serializer = value_serializer = "raw"

    def __init__(self, data: dict[bytes, bytes]) -> None:
        self.data = data
        self.changelog_topic = self

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    async def send(self, **_: Any) -> None:
        return None


class _Topic:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, *, key: bytes, value: bytes, partition: int | None = None) -> Any:
        self.sent.append(value)
        return _done()


async def _done() -> None:
    return None


def _update(offset: int, value: bytes) -> Any:
    return SimpleNamespace(value=value, message=SimpleNamespace(partition=1, offset=offset))


def _partial(start: float) -> Partial:
    return Partial(
        tenant="vc-a", window_start=start, host="h1", seq=7, ts=start + 1.0, samples=1,
        instance_s=10.0, gpu_s=10.0, util_sum=50.0, levels=(0, 1, 0, 0), weighted_s=5.0,
    )  # fmt: skip


async def test_a_worker_carries_on_from_an_old_format_partition_state() -> None:
    table = _Table({b"p|1": OLD_FORMAT[1]})
    stats = WorkerStats()
    stage = Windows(
        table=table,
        features_topic=_Topic(),
        window=WindowSettings(window_s=10.0, grace_s=2.0),
        stats=stats,
        sources=2,
        deadletter=DeadLetters(_Topic(), stats),
    )
    stale = codec.encode_watermark(codec.SourceWatermark(source=0, ts=250.0))
    await stage.on_updates([_update(0, stale)])  # older than what partition 0 reported
    core = _unranked(table.data)[b"p|1"]
    # the shard counts it is stored in now: those of the settings (8 host, 64 index)
    assert core.pop("layout") == {"index": 64, "host": [[8, None]]}
    assert core == codec.loads(_core_of(OLD_FORMAT[1]))
    assert codec.loads(table.data[b"p|1"])["off"] == 0  # the record it accounts for
    migrated = _unranked(table.data)
    late = codec.encode_partials([_partial(230.0)])  # ends at 240: already reported out
    await stage.on_updates([_update(1, late)])
    assert stats.late_partials == 1
    assert _unranked(table.data) == migrated  # a late partial changes nothing
    index = [codec.loads(table.data.get(b"p|1|i%d" % k)) for k in range(stage.cfg.index_shards)]
    ps = PartitionState.from_stored(codec.loads(table.data[b"p|1"]), index)
    old = codec.loads(OLD_FORMAT[1])
    assert ps.open == old["open"] and ps.job_tenants == old["job_tenants"]
    assert ps.upto == old["upto"] and ps.sources == old["sources"]
