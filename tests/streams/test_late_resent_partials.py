"""Partials sent again after their window closed (the ingest stage of a worker that took
over from a killed one re-sends the batch the killed one had not recorded yet) change no
window, and the warning about them names that cause, not only data that came late."""

from __future__ import annotations

import logging

import pytest

from dprobe.streams import codec
from tests.streams.helpers import make_snapshots
from tests.streams.test_batch_semantics import (
    UPDATE_PARTITIONS,
    FakeTable,
    FakeTopic,
    _event,
    _ingest,
    _windows,
)


async def test_partials_resent_after_their_window_closed_change_nothing_and_say_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    features = FakeTopic()
    stage = _windows(features, FakeTable())
    snap = make_snapshots(hosts=1, ticks=1, t0=900.0)[0]  # partials of window [900, 910)
    parts = _ingest(FakeTopic(UPDATE_PARTITIONS), FakeTable())._observe(snap, 0, {}, offset=0)
    value = codec.encode_partials(parts)
    progress = codec.encode_watermark(codec.SourceWatermark(source=0, ts=1000.0))
    await stage.on_updates([_event("updates", 0, 0, value), _event("updates", 0, 1, progress)])
    emitted = list(features.sent)
    assert emitted, "the window closed"
    with caplog.at_level(logging.WARNING, logger="dprobe.streams.windows"):
        await stage.on_updates([_event("updates", 0, 2, value)])  # the same batch, re-sent
    assert features.sent == emitted
    assert stage.stats.late_partials == len(parts)
    [warning] = [r.getMessage() for r in caplog.records if "late partial" in r.getMessage()]
    assert "after a worker was killed" in warning
    assert "the closed window already held those" in warning
