"""End to end on a real broker: telemetry whose demand shifts from one tenant to another
becomes zero-sum ScalingEvents (scale_up for the grower, scale_down for the shrinker), with
no event duplicated across a worker restart, and /metrics shows lag and tenant series;
once over PLAINTEXT and once over SASL (SCRAM-SHA-512)."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from pathlib import Path

import pytest

from dprobe import schema
from dprobe.config import KafkaSettings
from tests.conftest import _free_port
from tests.streams.helpers import (
    GB,
    Broker,
    consume,
    consume_all,
    create_worker_topics,
    produce,
    snapshot_records,
    worker_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = 1_700_000_000.0
WINDOW_S = 60.0
TICK_S = 10.0
HOSTS = 8  # 64 GPUs, the cluster capacity the worker is given


def _gpus_of(tenant: str, k: int, n: int) -> int:
    """GPUs each tenant runs at tick ``k`` of ``n``: vc-a grows 4 -> 24, vc-d shrinks 24 -> 2."""
    f = min(1.0, k / (0.6 * n))
    return {"vc-a": round(4 + 20 * f), "vc-b": 4, "vc-c": 4, "vc-d": round(24 - 22 * f)}[tenant]


def _shifting_snapshots(ticks: int) -> list[schema.HostSnapshot]:
    out = []
    for k in range(ticks):
        slots = [(h, g) for g in range(8) for h in range(HOSTS)]  # spread over hosts
        per_host: dict[int, list[schema.Proc]] = {h: [] for h in range(HOSTS)}
        for tenant in ("vc-a", "vc-b", "vc-c", "vc-d"):
            for _ in range(_gpus_of(tenant, k, ticks)):
                h, g = slots.pop(0)
                per_host[h].append(
                    schema.Proc(
                        pid=1000 + g,
                        gpu=f"GPU-{h}-{g}",
                        tenant=tenant,
                        job=f"{tenant}-{h}-{g}",
                        sm_util=80.0,
                        mem_util=50.0,
                        mem_used=20 * GB,
                    )
                )
        for h in range(HOSTS):
            gpus = tuple(
                schema.Gpu(
                    uuid=f"GPU-{h}-{g}",
                    index=g,
                    util=80.0,
                    mem_util=50.0,
                    mem_used=20 * GB,
                    mem_total=80 * GB,
                    power_w=300.0,
                )
                for g in range(8)
            )
            out.append(
                schema.HostSnapshot(
                    host=f"host-{h}",
                    ts=T0 + k * TICK_S,
                    interval_s=TICK_S,
                    seq=k,
                    gpus=gpus,
                    procs=tuple(per_host[h]),
                )
            )
    return out


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


async def test_demand_shift_becomes_zero_sum_scaling_events(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    await _demand_shift(kafka_bootstrap, tmp_path)


async def test_the_same_over_sasl_scram(sasl_kafka: KafkaSettings, tmp_path: Path) -> None:
    """Every client of the run (worker, lag poller, test producer and consumers) talks
    SASL_PLAINTEXT with SCRAM-SHA-512 to a broker that accepts nothing else."""
    await _demand_shift(sasl_kafka, tmp_path)


async def _demand_shift(kafka_bootstrap: Broker, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"e{tag}.", f"e2e-{tag}"
    await create_worker_topics(kafka_bootstrap, prefix)
    ticks = 6 * 40  # 40 windows of 60 s
    snaps = _shifting_snapshots(ticks)
    half = len(snaps) // 2
    port = _free_port()
    env = {
        "DPROBE_WORKER_METRICS_PORT": str(port),
        "DPROBE_WORKER_CAPACITY_GPUS": "64",
        "DPROBE_WORKER_PLAN_HORIZON_S": "600",
        "DPROBE_WORKER_LAG_INTERVAL_S": "1",
    }
    common = {
        "prefix": prefix,
        "app_id": app_id,
        "data_dir": tmp_path / "w",
        "window_s": WINDOW_S,
        "grace_s": 5.0,
        "log": tmp_path / "worker.log",
        "env": env,
    }
    events_topic = f"{prefix}scaling-events"

    await produce(kafka_bootstrap, f"{prefix}samples", snapshot_records(snaps[:half]))
    with worker_process(kafka_bootstrap, **common) as proc:
        first = await consume(kafka_bootstrap, events_topic, until=2, timeout_s=120)
        assert first, "no scaling event before the restart"
        await asyncio.sleep(3)  # let the lag task measure once more
        text = _scrape(port)
        assert f'dprobe_worker_consumer_lag{{consumergroup="{app_id}"' in text
        assert f'dprobe_worker_consumer_lag_sum{{consumergroup="{app_id}"' in text
        for tenant in ("vc-a", "vc-d"):
            assert f'dprobe_tenant_demand_gpus{{tenant="{tenant}"}}' in text
            assert f'dprobe_tenant_quota_gpus{{tenant="{tenant}"}}' in text
        assert 'dprobe_tenant_forecast_gpus{horizon="600"' in text
        await asyncio.sleep(2)
        assert proc.poll() is None

    await produce(kafka_bootstrap, f"{prefix}samples", snapshot_records(snaps[half:]))
    with worker_process(kafka_bootstrap, **common) as proc:
        # Wait until the last closable window is out, then for the plans it completes.
        last_end = T0 + ticks * TICK_S - 2 * WINDOW_S
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 240
        while loop.time() < deadline:
            feats = await consume(kafka_bootstrap, f"{prefix}features", until=10**9, timeout_s=2)
            if any(schema.decode_window(r).window_end >= last_end for r in feats):
                break
        else:
            pytest.fail("the restarted worker did not reach the end of the data")
        await asyncio.sleep(5)
        raws = await consume_all(kafka_bootstrap, events_topic)
        assert proc.poll() is None

    events = [schema.decode_scaling_event(r) for r in raws]
    ids = [e.event_id for e in events]
    assert len(ids) == len(set(ids)), "an event was produced twice"
    plans: dict[str, list[schema.ScalingEvent]] = {}
    for e in events:
        plans.setdefault(e.plan_id, []).append(e)
        assert e.target_quota_gpus % 8 == 0 and e.current_quota_gpus % 8 == 0  # whole nodes
    for plan in plans.values():
        assert sum(e.delta_gpus for e in plan) == 0
    # Early on vc-a may lend its idle nodes to vc-d; once the shift is under way, vc-a only
    # grows and vc-d only shrinks, and each ends the run with the last move in that direction.
    shift = T0 + 0.3 * ticks * TICK_S
    late = [e for e in events if e.ts >= shift]
    assert {e.action for e in late if e.tenant == "vc-a"} == {"scale_up"}
    assert {e.action for e in late if e.tenant == "vc-d"} == {"scale_down"}
    # Every tenant was there at the first plan: it starts from the even split, and the
    # quotas, replayed plan by plan, never exceed the cluster.
    quota = dict.fromkeys(("vc-a", "vc-b", "vc-c", "vc-d"), 16.0)
    for plan in sorted(plans.values(), key=lambda p: p[0].ts):
        for e in plan:
            assert quota[e.tenant] == e.current_quota_gpus
            quota[e.tenant] = e.target_quota_gpus
        assert sum(quota.values()) <= 64
