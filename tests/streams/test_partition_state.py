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


@pytest.mark.parametrize("raw", OLD_FORMAT)
def test_an_old_format_state_round_trips_byte_for_byte(raw: bytes) -> None:
    plain = codec.loads(raw)
    ps = PartitionState.from_plain(plain)
    assert ps.to_plain() == plain
    assert codec.dumps(ps.to_plain()) == raw


def test_the_state_of_a_fresh_partition_is_stored_as_before() -> None:
    assert codec.dumps(PartitionState.from_plain(None).to_plain()) == OLD_FORMAT[0]


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
    assert table.data[b"p|1"] == OLD_FORMAT[1]
    late = codec.encode_partials([_partial(230.0)])  # ends at 240: already reported out
    await stage.on_updates([_update(1, late)])
    assert stats.late_partials == 1
    assert table.data[b"p|1"] == OLD_FORMAT[1]
