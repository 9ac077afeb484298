"""Job-only windows after a jump in event time (a jobs-only partition quiet over a
weekend) are found in time that does not grow with windows x tenants: the batch that
closes them asked each job book once per window of the gap, for every tenant that ever
sent a job event (minutes of event loop, long past the group's session timeout). The
windows found are those a per-window scan of the books finds."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from dprobe import schema
from dprobe.streams import codec
from dprobe.streams.state import job_book
from tests.streams.test_batch_semantics import WINDOW_S, FakeTable, FakeTopic, _windows

T = 1_700_000_000.0


def _update(offset: int, value: bytes) -> Any:
    message = SimpleNamespace(topic="u", partition=0, offset=offset)
    return SimpleNamespace(value=value, message=message)


def _job(offset: int, tenant: str, job: str, kind: str, ts: float) -> Any:
    ev = schema.JobEvent(ts=ts, event=kind, job=job, tenant=tenant, gpus=1)  # type: ignore[arg-type]
    return _update(offset, codec.encode_job(ev))


def _log(tenants: int) -> list[Any]:
    out = [_update(0, codec.encode_watermark(codec.SourceWatermark(source=0, ts=0.0)))]
    for i in range(tenants):
        out.append(_job(len(out), f"t{i}", "a", "submit", T + i))
        out.append(_job(len(out), f"t{i}", "a", "finish", T + i + 1))
    out.append(_job(len(out), "long", "b", "start", T + 5.0))  # runs across the gap
    out.append(_job(len(out), "long", "b", "finish", T + 3_000.0))
    out.append(_job(len(out), "late", "c", "submit", T + 50_000.0))  # queued after the gap
    out.append(_job(len(out), "other", "d", "submit", T + 2 * 86_400.0))
    return out


def _scan(stage: Any, ps: Any, batch: Any, watermark: float) -> dict[float, set[str]]:
    """Every window of the gap, each book asked for each: the plain reference."""
    w = stage.cfg.window_s
    if not math.isfinite(watermark) or math.floor(watermark / w) * w <= ps.out_before:
        return {}
    books = stage._job_index(batch, ps).books
    first = min((t for book in books.values() if (t := book.first_ts()) is not None), default=None)
    if first is None:
        return {}
    oldest = math.floor((watermark - stage.cfg.job_fill_s) / w) * w
    base = max(ps.out_before, math.floor(first / w) * w, oldest)
    count = math.floor((watermark - base) / w)
    starts = (base + i * w for i in range(max(0, count)))
    return {s: {t for t, b in books.items() if b.has_jobs_at(s, s + w)} for s in starts}


def _emitted(features: FakeTopic) -> list[tuple[str, float]]:
    return [
        (w.tenant, w.window_start) for w in (schema.decode_window(v) for _, _, v in features.sent)
    ]


async def test_the_windows_of_a_jump_are_found_once_per_book(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = _log(30)
    calls = [0]
    scan = job_book.TenantJobs.has_jobs_at

    def counted(self: job_book.TenantJobs, start: float, end: float) -> bool:
        calls[0] += 1
        return scan(self, start, end)

    features = FakeTopic()
    stage = _windows(features, FakeTable())
    monkeypatch.setattr(job_book.TenantJobs, "has_jobs_at", counted)
    await stage.on_updates(log)
    gap_windows = 2 * 86_400.0 / WINDOW_S
    assert calls[0] < gap_windows, calls[0]

    # the same windows as a scan of every book for every window of the gap
    monkeypatch.setattr(job_book.TenantJobs, "has_jobs_at", scan)
    features_ref = FakeTopic()
    ref = _windows(features_ref, FakeTable())
    ref._job_starts = lambda ps, batch, wm: _scan(ref, ps, batch, wm)  # type: ignore[method-assign]
    await ref.on_updates(log)
    assert _emitted(features) == _emitted(features_ref)
    assert ("long", T - T % WINDOW_S + 2_000.0) in _emitted(features)
