"""A crash between the writes of one close (several window starts closed by one watermark
step) and a replay from the last commit emit the windows an uninterrupted run emits: a
partial that the uninterrupted run dropped as late does not get into a window the crash
left open, and no window loses what it held."""

from __future__ import annotations

from typing import Any

from dprobe import schema
from dprobe.streams import codec
from dprobe.streams.state.window_agg import Partial
from tests.streams.test_batch_semantics import FakeTable, FakeTopic, _event, _windows


def _part(tenant: str, start: float, host: str, seq: int) -> Partial:
    return Partial(
        tenant=tenant, window_start=start, host=host, seq=seq, ts=start + 1.0, samples=1,
        instance_s=1.0, gpu_s=1.0, util_sum=50.0, levels=(0, 1, 0, 0), weighted_s=0.5,
    )  # fmt: skip


def _log() -> list[Any]:
    values = [
        codec.encode_partials([_part("vc-a", 0.0, "h1", 1)]),
        codec.encode_partials([_part("vc-b", 10.0, "h2", 2)]),
        # one step closes both [0, 10) and [10, 20) (watermark 25 - grace 2)
        codec.encode_watermark(codec.SourceWatermark(source=0, ts=25.0)),
        # late for [10, 20): dropped by an uninterrupted run
        codec.encode_partials([_part("vc-b", 10.0, "h3", 7)]),
        codec.encode_watermark(codec.SourceWatermark(source=0, ts=45.0)),
    ]
    return [_event("updates", 0, i, v) for i, v in enumerate(values)]


def _windows_by_key(sent: list[tuple[int, bytes, bytes]]) -> dict[tuple[str, float], Any]:
    out: dict[tuple[str, float], Any] = {}
    for _, _, raw in sent:
        w = schema.decode_window(raw)
        out.setdefault((w.tenant, w.window_start), w)
    return out


async def test_a_crash_between_two_closes_of_one_step_changes_no_window() -> None:
    features = FakeTopic()
    stage = _windows(features, FakeTable())
    await stage.on_updates(_log())
    expected = _windows_by_key(features.sent)
    assert expected[("vc-b", 10.0)].hosts == 1  # the late partial was dropped

    # the same batch, with the process dying right after the first close's partition
    # write (nothing was committed: the replay starts at offset 0)
    features = FakeTopic()
    stage = _windows(features, FakeTable())
    await stage.on_updates(_log())
    changelog = stage.table.changelog
    first = next(i for i, (_, key, _) in enumerate(changelog) if key == b"p|0")
    emitted_before_crash = features.sent[:1]  # [0, 10) of vc-a only
    assert _windows_by_key(emitted_before_crash).keys() == {("vc-a", 0.0)}

    features = FakeTopic()
    features.sent.extend(emitted_before_crash)
    stage = _windows(features, FakeTable.recovered(changelog[: first + 1]))
    await stage.on_updates(_log())
    got = _windows_by_key(features.sent)
    assert got.keys() == expected.keys()
    for key, window in expected.items():
        assert got[key] == window, key
