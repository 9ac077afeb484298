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
