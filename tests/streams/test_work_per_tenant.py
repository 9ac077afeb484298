"""The work one record costs does not grow with the number of tenants.

With 5,000 tenants a worker used to rebuild every tenant's dashboard view on every
window record and rewrite its whole tenant index on every batch, so the cost of a
minute grew with the square of the tenants. Here: the planning stage builds views once
per plan, never per window; a window-stage batch that touches one tenant writes about
as many bytes with 5,000 tenants open as with 10.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from dprobe.models.forecast.baselines import LastValue
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.schema import LevelCounts, TenantWindow
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec
from dprobe.streams.deadletter import DeadLetters
from dprobe.streams.plan_order import PlanOrder
from dprobe.streams.planning import Planning
from dprobe.streams.planning_store import PlanningStore
from dprobe.streams.state.window_agg import Partial, WindowSettings
from dprobe.streams.windows import Windows
from tests.streams.test_batch_semantics import FakeEvents, FakeTable, FakeTopic, _event

T0 = 1_700_000_040.0


def _window(tenant: str, end: float) -> TenantWindow:
    return TenantWindow(
        tenant=tenant, window_start=end - 60.0, window_end=end, hosts=1, gpus_busy=1.0,
        instances=1.0, util_sum=0.0, level_counts=LevelCounts(), effective_demand_gpus=1.0,
        pending_gpus=0.0, running_gpus=1.0,
    )  # fmt: skip


async def test_views_are_built_once_per_plan_not_per_window(tmp_path: Path) -> None:
    loop = PlanLoop(LastValue(), PlanLoopSettings(capacity_gpus=800, horizon_s=60.0))
    order = PlanOrder(loop, partitions=1)
    planning = Planning(
        make_order=lambda: order,
        store=PlanningStore(FakeTable(), chunk_bytes=65_536),
        events=FakeEvents(),
        stats=WorkerStats(),
    )
    calls = {"n": 0}
    tenants_of = loop.tenants

    def counting() -> Any:
        calls["n"] += 1
        return tenants_of()

    loop.tenants = counting  # type: ignore[method-assign]
    offset = 0
    for end in (T0 + 60.0, T0 + 120.0):
        for i in range(500):
            await planning.on_message(codec.encode_plan_window(_window(f"vc-{i:04d}", end)), offset)
            offset += 1
        # once when planning starts (restoring its state), then only the plan before
        assert calls["n"] == (2 if end > T0 + 60.0 else 1)
        await planning.on_message(codec.encode_progress(codec.WindowProgress(0, end)), offset)
        offset += 1
    assert calls["n"] == 3  # the start, then one per plan
    assert set(planning.stats.tenants) == {f"vc-{i:04d}" for i in range(500)}


def _partial(tenant: str, seq: int) -> Partial:
    return Partial(
        tenant=tenant, window_start=T0, host="h1", seq=seq, ts=T0 + 1.0, samples=1,
        instance_s=1.0, gpu_s=1.0, util_sum=50.0, levels=(0, 1, 0, 0), weighted_s=0.5,
    )  # fmt: skip


def _bytes_of_one_tenants_batch(open_tenants: int) -> int:
    """Changelog bytes a batch of one tenant's partial writes with ``open_tenants``
    tenants' windows open in the same partition."""

    async def run() -> int:
        table = FakeTable()
        stats = WorkerStats()
        stage = Windows(
            table=table, features_topic=FakeTopic(), window=WindowSettings(window_s=60.0),
            stats=stats, sources=1, deadletter=DeadLetters(FakeTopic(), stats),
        )  # fmt: skip
        opened = [
            _event("updates", 0, i, codec.encode_partials([_partial(f"vc-{i:05d}", 1)]))
            for i in range(open_tenants)
        ]
        await stage.on_updates(opened)
        before = len(table.changelog)
        one = codec.encode_partials([_partial("vc-00000", 2)])
        await stage.on_updates([_event("updates", 0, open_tenants, one)])
        return sum(len(k) + len(v or b"") for _, k, v in table.changelog[before:])

    return asyncio.run(run())


def test_a_batch_writes_what_its_tenants_changed_not_every_tenant() -> None:
    few = _bytes_of_one_tenants_batch(10)
    lots = _bytes_of_one_tenants_batch(5_000)
    # the index shard holding the tenant grows with tenants / shards (5,000 / 64 here)
    assert lots < few + 8_000, (few, lots)
