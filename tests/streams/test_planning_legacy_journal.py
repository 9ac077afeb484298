"""A worker upgraded from local files whose older version died while it appended to
``plan-loop.ckpt.journal`` (its last line cut short) starts from them as from the whole
lines: the cut line is skipped, whatever record it held."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.models.checkpoint import save_state
from dprobe.schema import decode_scaling_event
from dprobe.streams import codec
from tests.streams.test_batch_semantics import FakeEvents, FakeTable
from tests.streams.test_planning_journal import _order, _planning, _records


def _older_files(folder: Path, records: list[bytes], cut: bytes | None) -> Path:
    """An older worker's checkpoint after the first half of ``records`` and its journal
    of the next three (plus ``cut``, a line cut short, when given)."""
    half = len(records) // 2
    old = _order()
    for raw in records[:half]:
        message = codec.decode_planning(raw)
        if isinstance(message, codec.WindowProgress):
            old.on_progress(message.partition, message.upto)
        else:
            old.on_window(message)
    folder.mkdir()
    legacy = folder / "plan-loop.ckpt"
    save_state(old.state_dict(), legacy)
    lines = records[half : half + 3] + ([cut] if cut is not None else [])
    (folder / "plan-loop.ckpt.journal").write_bytes(b"\n".join(lines))
    return legacy


async def _upgraded(legacy: Path, records: list[bytes]) -> list[str]:
    """The event ids of a worker that starts from an older worker's files, then takes
    the records after them."""
    half = len(records) // 2
    events = FakeEvents()
    planning = _planning(FakeTable(), events, legacy=legacy)
    for offset in range(half + 3, len(records)):
        await planning.on_message(records[offset], offset)
    return [decode_scaling_event(v).event_id for _, _, v in events.sent]


@pytest.mark.parametrize("kind", [codec.PROGRESS, codec.STARTED, codec.PLAN_WINDOW])
async def test_a_line_cut_short_in_the_local_journal_is_skipped(
    tmp_path: Path, kind: bytes
) -> None:
    records = _records()
    later = records[len(records) // 2 + 3 :]
    mark = codec.encode_started(codec.WorkerStarted(window_s=60.0, at=1.0))
    whole = mark if kind == codec.STARTED else next(r for r in later if r.startswith(kind))
    cut = whole[: len(whole) // 2]
    expected = await _upgraded(_older_files(tmp_path / "whole", records, None), records)
    assert expected
    assert await _upgraded(_older_files(tmp_path / "cut", records, cut), records) == expected
