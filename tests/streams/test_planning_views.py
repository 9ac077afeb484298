"""Only the worker that plans exports the capacity plans share: a worker that never took
the planning partition, or gave it away, exports no ``dprobe_capacity_gpus`` sample. The
line it logs for each cluster report says the capacity it takes."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dprobe.schema import ClusterReport
from dprobe.sinks.worker_metrics import WorkerCollector
from dprobe.streams import codec
from tests.streams.test_batch_semantics import FakeEvents, FakeTable
from tests.streams.test_planning_journal import _planning, _records


def _capacity_lines(planning) -> list[str]:  # type: ignore[no-untyped-def]
    registry = CollectorRegistry()
    WorkerCollector(planning.stats, registry=registry)
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if line.startswith("dprobe_capacity_gpus ")]


async def test_capacity_is_exported_by_the_planning_worker_only() -> None:
    planning = _planning(FakeTable(), FakeEvents())
    assert _capacity_lines(planning) == []  # nothing planned here yet
    for offset, raw in enumerate(_records()[:5]):
        await planning.on_message(raw, offset)
    assert _capacity_lines(planning) == ["dprobe_capacity_gpus 64.0"]
    planning.released()  # another worker plans now
    assert _capacity_lines(planning) == []


async def test_a_report_without_a_capacity_is_logged_as_leaving_it_unchanged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    planning = _planning(FakeTable(), FakeEvents())
    caplog.set_level(logging.INFO, logger="dprobe.streams.planning")
    for offset, report in enumerate(
        [
            ClusterReport(ts=1.0, source="kueue", quotas={"vc-a": 8.0}),
            ClusterReport(ts=2.0, source="kueue", capacity_gpus=32.0, quotas={"vc-a": 8.0}),
        ]
    ):
        await planning.on_message(codec.encode_cluster(report), offset)
    said = [r.getMessage() for r in caplog.records if "cluster report from" in r.getMessage()]
    assert [line.split(";")[0] for line in said] == [
        "cluster report from kueue: capacity unchanged, 1 quota(s)",  # not "unchanged GPUs"
        "cluster report from kueue: capacity 32 GPUs, 1 quota(s)",
    ]


async def test_a_rebalance_that_leaves_planning_here_keeps_the_capacity_exported() -> None:
    """A rebalance that begins while a plan's events are on the way (the revoke signal runs
    at that await) and leaves planning on this worker does not take the capacity off
    /metrics until the next plan (seen live: gone for up to a window after a worker joined)."""
    planning = None

    class RevokedMidPlan(FakeEvents):
        revoked = False

        async def send_all(self, records: list[tuple[bytes, bytes]]) -> None:
            if records and not self.revoked:
                self.revoked = True
                assert planning is not None
                planning.revoke()  # the rebalance begins while this plan is delivered
            await super().send_all(records)

    events = RevokedMidPlan()
    planning = _planning(FakeTable(), events)
    records = iter(enumerate(_records()))
    for offset, raw in records:
        await planning.on_message(raw, offset)
        if events.revoked:
            break
    assert events.revoked
    for offset, raw in records:  # planning stayed: the next records come to this worker
        before = planning.loop.planned_upto
        await planning.on_message(raw, offset)
        if planning.loop.planned_upto == before:  # a record that completes no plan
            break
    assert planning.loop.planned_upto == before
    assert _capacity_lines(planning) == ["dprobe_capacity_gpus 64.0"]
