"""Per-GPU and per-tenant gauges of the collector's last snapshot, read at scrape time.

Label names follow NVIDIA's dcgm-exporter (``gpu`` index, ``UUID``, ``modelName``,
``Hostname``) so dashboards that join on them keep working, plus ``tenant``. A GPU or a
tenant that is gone from the last snapshot is gone from the next scrape (no stale series).

- ``dprobe_gpu_utilization_percent``, ``dprobe_gpu_memory_utilization_percent``,
  ``dprobe_gpu_memory_used_bytes``, ``dprobe_gpu_memory_total_bytes``,
  ``dprobe_gpu_power_watts`` ``{gpu,UUID,modelName,Hostname}``
- ``dprobe_tenant_processes``, ``dprobe_tenant_gpus``,
  ``dprobe_tenant_sm_utilization_percent`` (sum over its processes),
  ``dprobe_tenant_gpu_memory_used_bytes`` ``{tenant,Hostname}``

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> from dprobe.schema import Gpu, HostSnapshot, Proc
    >>> reg = CollectorRegistry()
    >>> fleet = FleetGauges(registry=reg)
    >>> g = Gpu(uuid="GPU-1", index=0, util=80, mem_util=40, mem_used=10, mem_total=80,
    ...         power_w=300)
    >>> p = Proc(pid=7, gpu="GPU-1", tenant="vc-a", job="j", sm_util=60, mem_util=30,
    ...          mem_used=10)
    >>> fleet.observe(HostSnapshot(host="n1", ts=1.0, interval_s=1.0, seq=0, gpus=(g,),
    ...                            procs=(p,)), names={"GPU-1": "NVIDIA H200"})
    >>> reg.get_sample_value("dprobe_gpu_utilization_percent",
    ...     {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA H200", "Hostname": "n1"})
    80.0
    >>> reg.get_sample_value("dprobe_tenant_gpus", {"tenant": "vc-a", "Hostname": "n1"})
    1.0
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dprobe.schema import HostSnapshot

GPU_LABELS = ["gpu", "UUID", "modelName", "Hostname"]
TENANT_LABELS = ["tenant", "Hostname"]


class FleetGauges(Collector):
    """Holds the last snapshot and exports it; :meth:`observe` after every tick."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self._snap: HostSnapshot | None = None
        self._names: dict[str, str] = {}
        if registry is not None:
            registry.register(self)

    def observe(self, snap: HostSnapshot, names: Mapping[str, str | None] | None = None) -> None:
        """Export ``snap`` from now on; ``names``: GPU model name by UUID, when known."""
        self._names = {u: n for u, n in (names or {}).items() if n}
        self._snap = snap

    def clear(self) -> None:
        """Export nothing until the next :meth:`observe` (the GPUs cannot be read now)."""
        self._snap = None
        self._names = {}

    def collect(self) -> Iterator[Metric]:
        snap = self._snap
        gpu_metrics = {
            "util": GaugeMetricFamily(
                "dprobe_gpu_utilization_percent", "GPU utilisation", labels=GPU_LABELS
            ),
            "mem_util": GaugeMetricFamily(
                "dprobe_gpu_memory_utilization_percent", "Memory controller utilisation",
                labels=GPU_LABELS,
            ),
            "mem_used": GaugeMetricFamily(
                "dprobe_gpu_memory_used_bytes", "GPU memory used", labels=GPU_LABELS
            ),
            "mem_total": GaugeMetricFamily(
                "dprobe_gpu_memory_total_bytes", "GPU memory in all", labels=GPU_LABELS
            ),
            "power_w": GaugeMetricFamily(
                "dprobe_gpu_power_watts", "GPU power draw", labels=GPU_LABELS
            ),
        }  # fmt: skip
        tenant_metrics = {
            "procs": GaugeMetricFamily(
                "dprobe_tenant_processes", "The tenant's GPU processes on this host",
                labels=TENANT_LABELS,
            ),
            "gpus": GaugeMetricFamily(
                "dprobe_tenant_gpus", "GPUs running at least one of the tenant's processes",
                labels=TENANT_LABELS,
            ),
            "sm": GaugeMetricFamily(
                "dprobe_tenant_sm_utilization_percent",
                "SM utilisation summed over the tenant's processes", labels=TENANT_LABELS,
            ),
            "mem": GaugeMetricFamily(
                "dprobe_tenant_gpu_memory_used_bytes", "GPU memory of the tenant's processes",
                labels=TENANT_LABELS,
            ),
        }  # fmt: skip
        if snap is not None:
            host = snap.host
            for g in snap.gpus:
                labels = [str(g.index), g.uuid, self._names.get(g.uuid, ""), host]
                for field, metric in gpu_metrics.items():
                    metric.add_metric(labels, float(getattr(g, field)))
            per: dict[str, list[float]] = {}
            gpus: dict[str, set[str]] = {}
            for p in snap.procs:
                acc = per.setdefault(p.tenant, [0.0, 0.0, 0.0])
                acc[0] += 1
                acc[1] += p.sm_util
                acc[2] += p.mem_used
                gpus.setdefault(p.tenant, set()).add(p.gpu)
            for tenant in sorted(per):
                n, sm, mem = per[tenant]
                labels = [tenant, host]
                tenant_metrics["procs"].add_metric(labels, n)
                tenant_metrics["gpus"].add_metric(labels, float(len(gpus[tenant])))
                tenant_metrics["sm"].add_metric(labels, sm)
                tenant_metrics["mem"].add_metric(labels, mem)
        yield from gpu_metrics.values()
        yield from tenant_metrics.values()
