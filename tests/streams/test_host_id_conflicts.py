"""Two collectors under one host id: the worker keeps the first's snapshots, drops the
second's (their seqs were taken already), counts them by host and says so once, not once
per snapshot. Compared with the same ingest fed the first collector alone."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from dprobe import schema
from dprobe.streams import codec
from dprobe.streams import ingest as ingest_module
from tests.streams.helpers import make_snapshots
from tests.streams.test_batch_semantics import FakeTable, FakeTopic, _ingest


def _event(offset: int, snap: schema.HostSnapshot) -> Any:
    message = SimpleNamespace(
        topic="samples", partition=0, offset=offset, timestamp=snap.ts, key=snap.host.encode()
    )
    return SimpleNamespace(value=schema.encode(snap), message=message)


async def _fold(snaps: list[schema.HostSnapshot]) -> tuple[Any, FakeTopic]:
    updates = FakeTopic(2)
    ingest = _ingest(updates, FakeTable())
    events = [_event(i, s) for i, s in enumerate(snaps)]
    for i in range(0, len(events), 4):
        await ingest.on_snapshots(events[i : i + 4])
    return ingest, updates


def _partials(updates: FakeTopic) -> list[Any]:
    """Every partial sent (a batch sends them by tenant: the order set aside)."""
    out: list[Any] = []
    for _, _, value in updates.sent:
        decoded = codec.decode_update(value)
        if isinstance(decoded, list):
            out += decoded
    return sorted(out, key=lambda p: (p.seq, p.tenant, p.window_start))


async def test_a_second_collector_under_one_host_id_is_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = make_snapshots(hosts=1, ticks=40)
    # the second starts from seq 0 halfway through, half a second after each of the first's
    second = [
        msgspec.structs.replace(s, seq=i, ts=s.ts + 0.5)
        for i, s in enumerate(make_snapshots(hosts=1, ticks=40, seed=2)[20:])
    ]
    mixed = first[:20] + [s for pair in zip(first[20:], second, strict=True) for s in pair]
    alone, alone_updates = await _fold(first)
    with caplog.at_level(logging.WARNING, logger="dprobe.streams.ingest"):
        both, both_updates = await _fold(mixed)
    assert both.stats.conflicting_snapshots == {"host-0": 20}
    assert both.stats.duplicates == 20
    assert both.stats.snapshots == alone.stats.snapshots == 40
    assert both.stats.lost_snapshots == {} and both.stats.resets == 0
    assert _partials(both_updates) == _partials(alone_updates)
    warnings = [r.getMessage() for r in caplog.records if "second collector" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("host host-0: dropped snapshot seq 0 of ")
    assert ": seqs up to 20 are taken already, and a redelivery is never newer" in warnings[0]


async def test_hosts_warned_about_longer_ago_than_the_interval_are_forgotten(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A fleet whose host ids churn (each seen in conflict once, then never again) keeps
    only the hosts warned about within the last interval, and a host seen again after
    the interval is warned about again."""
    clock = [1000.0]
    fake_time = SimpleNamespace(
        monotonic=lambda: clock[0], time=time.time, strftime=time.strftime, gmtime=time.gmtime
    )
    monkeypatch.setattr(ingest_module, "time", fake_time)
    updates = FakeTopic(2)
    ingest = _ingest(updates, FakeTable())
    base = make_snapshots(hosts=1, ticks=6)
    step_s = ingest_module.CONFLICT_WARN_EVERY_S / 4
    offset = 0

    async def conflict(host: str) -> None:
        nonlocal offset
        # seq 5 taken, then a seq 0 stamped later: another collector under this host id
        snaps = [
            msgspec.structs.replace(base[5], host=host),
            msgspec.structs.replace(base[0], host=host, ts=base[5].ts + 0.5),
        ]
        await ingest.on_snapshots([_event(offset + i, s) for i, s in enumerate(snaps)])
        offset += len(snaps)

    with caplog.at_level(logging.WARNING, logger="dprobe.streams.ingest"):
        for n in range(40):
            clock[0] += step_s
            await conflict(f"churn-{n}")
            assert len(ingest._conflict_warned) <= 4, sorted(ingest._conflict_warned)
        assert set(ingest._conflict_warned) == {f"churn-{n}" for n in range(36, 40)}
        clock[0] += step_s
        await conflict("churn-0")  # seen again long after its warning: warned again
    warned = [r.getMessage() for r in caplog.records if "second collector" in r.getMessage()]
    assert len(warned) == 41
    assert warned[-1].startswith("host churn-0: ")
    assert ingest.stats.conflicting_snapshots["churn-39"] == 1
