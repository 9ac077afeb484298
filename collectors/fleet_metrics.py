"""Per-GPU and per-tenant gauges of the collector's last snapshot, read at scrape time.

Label names follow NVIDIA's dcgm-exporter (``gpu`` index, ``UUID``, ``modelName``,
``Hostname``, and for a MIG instance ``GPU_I_PROFILE`` and ``GPU_I_ID``) so dashboards
that join on them keep working, plus ``tenant``. As in dcgm-exporter, a MIG instance
carries its physical GPU's ``gpu``, ``UUID`` and ``modelName``, its profile (``1g.5gb``)
and GPU instance id; a whole GPU (a MIG parent too) has both MIG labels empty. A MIG
instance whose GPU instance id NVML does not give keeps its own UUID, MIG labels empty. A
GPU or a tenant that is gone from the last snapshot is gone from the next scrape (no
stale series).

- ``dprobe_gpu_utilization_percent``, ``dprobe_gpu_memory_utilization_percent``,
  ``dprobe_gpu_memory_used_bytes``, ``dprobe_gpu_memory_total_bytes``,
  ``dprobe_gpu_power_watts`` ``{gpu,UUID,modelName,Hostname,GPU_I_PROFILE,GPU_I_ID}``
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
    ...     {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA H200", "Hostname": "n1",
    ...      "GPU_I_PROFILE": "", "GPU_I_ID": ""})
    80.0
    >>> reg.get_sample_value("dprobe_tenant_gpus", {"tenant": "vc-a", "Hostname": "n1"})
    1.0
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dprobe.schema import Gpu, HostSnapshot

GPU_LABELS = ["gpu", "UUID", "modelName", "Hostname", "GPU_I_PROFILE", "GPU_I_ID"]
_MIG_NAME = " MIG "  # NVML names a MIG instance "<GPU model> MIG <profile>"
TENANT_LABELS = ["tenant", "Hostname"]


class FleetGauges(Collector):
    """Holds the last snapshot and exports it; :meth:`observe` after every tick."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        # the last snapshot, its GPU names and MIG instance ids: replaced in one step, as a
        # scrape reads them from the server's thread
        self._last: tuple[HostSnapshot, dict[str, str], dict[str, int]] | None = None
        if registry is not None:
            registry.register(self)

    def observe(
        self,
        snap: HostSnapshot,
        names: Mapping[str, str | None] | None = None,
        instances: Mapping[str, int] | None = None,
    ) -> None:
        """Export ``snap`` from now on; ``names``: GPU model name by UUID, when known;
        ``instances``: a MIG instance's GPU instance id by its UUID, when known."""
        named = {u: n for u, n in (names or {}).items() if n}
        self._last = (snap, named, dict(instances or {}))

    def clear(self) -> None:
        """Export nothing until the next :meth:`observe` (the GPUs cannot be read now)."""
        self._last = None

    def collect(self) -> Iterator[Metric]:
        last = self._last
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
        if last is not None:
            snap, names, instances = last
            host = snap.host
            for g in snap.gpus:
                labels = _gpu_labels(g, host, names, instances)
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


def _gpu_labels(g: Gpu, host: str, names: dict[str, str], instances: dict[str, int]) -> list[str]:
    """dcgm-exporter's labels of GPU or MIG instance ``g`` (``GPU_LABELS``' order)."""
    instance = instances.get(g.uuid)
    if g.mig_parent is None or instance is None:
        return [str(g.index), g.uuid, names.get(g.uuid, ""), host, "", ""]
    name = names.get(g.uuid, "")
    profile = name.rpartition(_MIG_NAME)[2] if _MIG_NAME in name else ""
    return [str(g.index), g.mig_parent, names.get(g.mig_parent, ""), host, profile, str(instance)]
