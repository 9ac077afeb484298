"""MIG instances in the per-GPU gauges carry dcgm-exporter's MIG labels: the physical
GPU's ``gpu``, ``UUID`` and ``modelName``, and ``GPU_I_PROFILE`` / ``GPU_I_ID`` naming the
instance, so they join with dcgm-exporter's series (a whole GPU has them empty)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from dprobe.clock import ManualClock
from dprobe.collectors.fake_nvml import FakeGpu, FakeNvml
from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.nvml import NvmlBackend
from dprobe.collectors.seq import SeqCounter
from dprobe.collectors.service import Collector
from dprobe.collectors.spool import Spool

GIB = 1 << 30


async def test_mig_instances_carry_dcgm_exporters_mig_labels(tmp_path: Path) -> None:
    a100 = "NVIDIA A100-SXM4-40GB"
    nvml = FakeNvml(
        [
            FakeGpu(uuid="GPU-w", name=a100, util=30, mem_used=5 * GIB),
            FakeGpu(
                uuid="GPU-p",
                name=a100,
                mig_enabled=True,
                mem_used=3 * GIB,
                mig=[
                    FakeGpu(uuid="MIG-a", name=f"{a100} MIG 1g.5gb", gpu_instance_id=13,
                            mem_used=GIB, mem_total=5 * GIB),
                    FakeGpu(uuid="MIG-b", name=f"{a100} MIG 1g.5gb", gpu_instance_id=11,
                            mem_used=2 * GIB, mem_total=5 * GIB),
                ],
            ),
        ]
    )  # fmt: skip
    registry = CollectorRegistry()
    c = Collector(
        NvmlBackend(nvml),
        host="n1",
        interval_s=1.0,
        spool=Spool(tmp_path / "spool", max_bytes=1 << 20, fsync=False),
        seq=SeqCounter(tmp_path / "seq", fsync=False),
        metrics=CollectorMetrics(registry),
        clock=ManualClock(start=1.7e9),
        max_ticks=1,
    )
    async with c:
        await c.wait()
    used = {
        (s.labels["gpu"], s.labels["UUID"], s.labels["modelName"], s.labels["GPU_I_PROFILE"],
         s.labels["GPU_I_ID"]): s.value
        for fam in registry.collect() if fam.name == "dprobe_gpu_memory_used_bytes"
        for s in fam.samples
    }  # fmt: skip
    assert used == {
        ("0", "GPU-w", a100, "", ""): 5 * GIB,
        ("1", "GPU-p", a100, "", ""): 3 * GIB,
        ("1", "GPU-p", a100, "1g.5gb", "13"): GIB,
        ("1", "GPU-p", a100, "1g.5gb", "11"): 2 * GIB,
    }
