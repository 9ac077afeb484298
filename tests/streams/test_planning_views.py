"""Only the worker that plans exports the capacity plans share: a worker that never took
the planning partition, or gave it away, exports no ``dprobe_capacity_gpus`` sample."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from dprobe.sinks.worker_metrics import WorkerCollector
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
