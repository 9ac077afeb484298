"""``DprobeCollectorGpuLost`` fires for every NVML error that leaves a GPU out.

The NVML backend leaves a GPU out of its snapshots until the collector restarts after any
error of that GPU that does not pass by itself (lost, needing a reset, not found, a
corrupted inforom, insufficient power, ...). The alert must name every such kind, or a GPU
is left out with no alert.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import yaml

from dprobe.collectors.errors import BackendError
from dprobe.collectors.fake_nvml import FakeGpu, FakeNvml
from dprobe.collectors.nvml import NvmlBackend
from dprobe.collectors.nvml_errors import _KINDS

ROOT = Path(__file__).resolve().parents[2]


def _alert_kinds() -> set[str]:
    rules = yaml.safe_load((ROOT / "infra" / "prometheus" / "alerts.yml").read_text())
    (expr,) = [
        r["expr"]
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") == "DprobeCollectorGpuLost"
    ]
    (kinds,) = re.findall(r'kind=~"([^"]+)"', expr)
    return set(kinds.split("|"))


async def _gpus_read_after(code: int) -> int | None:
    """GPUs read after GPU 0's memory read failed once with NVML error ``code``; None when
    that failure failed the read as a whole (the collector then reopens NVML)."""
    nvml = FakeNvml([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b")])
    backend = NvmlBackend(nvml)
    await backend.open()
    try:
        nvml.fail("nvmlDeviceGetMemoryInfo", code, device=0)
        try:
            await backend.read()
        except BackendError:
            return None
        nvml.heal()  # the error has passed: a GPU not left out is read again
        return len((await backend.read()).gpus)
    finally:
        await backend.close()


def _kinds_that_leave_a_gpu_out() -> set[str]:
    """The kinds of NVML error after which the NVML backend reads one GPU fewer."""
    return {kind for code, (kind, _) in _KINDS.items() if asyncio.run(_gpus_read_after(code)) == 1}


def test_the_alert_names_every_kind_that_leaves_a_gpu_out() -> None:
    left_out = _kinds_that_leave_a_gpu_out()
    assert {"gpu_lost", "reset_required"} <= left_out
    assert _alert_kinds() == left_out
