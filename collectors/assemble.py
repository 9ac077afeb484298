"""Wire a :class:`Collector` from :class:`CollectorSettings` (used by ``dprobe collect``).

Per host: the spool lives in ``spool_dir/<host>``, the seq state in
``state_dir/seq-<host>``; snapshots go to ``<topic_prefix>samples``.

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> from dprobe.config import CollectorSettings
    >>> c = build_collector(CollectorSettings(host_id="h1"), registry=CollectorRegistry())
    >>> c.host, c.backend.name
    ('h1', 'synthetic')
"""

from __future__ import annotations

import socket
import string
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from dprobe.clock import AcceleratedClock, Clock, SystemClock
from dprobe.collectors.backend import GpuBackend
from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.sender import KafkaSender
from dprobe.collectors.seq import SeqCounter
from dprobe.collectors.service import Collector
from dprobe.collectors.spool import Spool
from dprobe.collectors.tenant_map import load_tenant_map
from dprobe.collectors.tenants import TenantResolver
from dprobe.collectors.topic_create import NewTopicSpec
from dprobe.config import CollectorSettings, is_file_of
from dprobe.errors import UsageError
from dprobe.schema import HostSnapshot


def tenant_names(count: int) -> list[str]:
    """Names of synthetic tenants: ``vc-a``, ``vc-b``, ... (``vc-27`` past 26).

    >>> tenant_names(3)
    ['vc-a', 'vc-b', 'vc-c']
    """
    letters = string.ascii_lowercase
    return [f"vc-{letters[i]}" if count <= 26 else f"vc-{i + 1}" for i in range(count)]


def make_clock(speed: float) -> Clock:
    """The wall clock, or an accelerated one when ``speed != 1``."""
    return SystemClock() if speed == 1.0 else AcceleratedClock(speed=speed)


def make_backend(settings: CollectorSettings, host: str, clock: Clock) -> GpuBackend:
    """The backend named by ``settings.backend``."""
    if settings.backend == "nvml":
        from dprobe.collectors.nvml import NvmlBackend

        return NvmlBackend(timeout_s=settings.nvml_timeout_s)
    from dprobe.collectors.synthetic import SyntheticBackend

    return SyntheticBackend(
        host=host,
        tenants=tenant_names(settings.tenants),
        gpus=settings.synthetic_gpus,
        seed=settings.seed,
        clock=clock,
        procs_per_gpu=settings.synthetic_procs_per_gpu,
    )


def check_proc_root(settings: CollectorSettings) -> None:
    """:class:`UsageError` when the NVML backend's ``proc_root`` is not a procfs (every
    procfs has a stat file, hidepid or not); nothing to check for the synthetic one.

    >>> from pathlib import Path
    >>> check_proc_root(CollectorSettings(backend="nvml", proc_root=Path("/nonexistent")))
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: collector.proc_root: /nonexistent is not a procfs ...
    """
    if settings.backend != "nvml":
        return
    if not is_file_of("collector.proc_root", settings.proc_root / "stat"):
        raise UsageError(
            f"collector.proc_root: {settings.proc_root} is not a procfs (no stat file in "
            "it), so no GPU process could be attributed: /proc, or where the host's /proc "
            "is mounted in a container"
        )


def make_resolver(settings: CollectorSettings) -> TenantResolver | None:
    """The pid -> tenant/job resolver of the NVML backend; ``None`` for the synthetic one,
    whose processes carry their tenant and job already. A given tenant map is read and
    checked whatever the backend (:class:`UsageError` naming what is wrong), so a file
    that is missing or invalid fails as early with the synthetic backend as with NVML,
    though the synthetic backend then does not use it. A ``proc_root`` that is not a
    procfs is refused (:class:`UsageError`) for the NVML backend.

    >>> make_resolver(CollectorSettings(backend="synthetic")) is None
    True
    """
    tenant_map = load_tenant_map(settings.tenant_map) if settings.tenant_map else None
    if settings.backend != "nvml":
        return None
    check_proc_root(settings)
    return TenantResolver(
        proc_root=settings.proc_root,
        tenant_map=tenant_map,
        env_vars=settings.tenant_env_vars,
        pod_log_dir=settings.pod_log_dir,
    )


def build_collector(
    settings: CollectorSettings,
    *,
    registry: CollectorRegistry,
    clock: Clock | None = None,
    backend: GpuBackend | None = None,
    send: bool = True,
    topic: str | None = None,
    max_ticks: int | None = None,
    on_snapshot: Callable[[HostSnapshot], None] | None = None,
) -> Collector:
    """A ready-to-start collector; ``send=False`` keeps snapshots in the spool only."""
    host = settings.host_id or socket.gethostname()
    clock = clock or make_clock(settings.clock_speed)
    metrics = CollectorMetrics(registry)
    backend = backend or make_backend(settings, host, clock)
    spool = Spool(
        settings.spool_dir / host,
        max_bytes=settings.spool_max_bytes,
        fsync=settings.spool_fsync,
        on_drop=lambda n, reason: metrics.dropped.labels(reason=reason).inc(n),
        on_corrupt=lambda n: metrics.sample_faults.labels(kind="spool_corrupt").inc(),
    )
    resolver = make_resolver(settings)
    sender = None
    if send:
        sender = KafkaSender(
            settings.kafka,
            topic or settings.kafka.topic("samples"),
            key=host.encode(),
            spool=spool,
            metrics=metrics,
            compression=settings.compression,
            batch_max=settings.send_batch_max,
            send_timeout_s=settings.send_timeout_s,
            create=NewTopicSpec(settings.partitions, settings.replication_factor),
        )
    return Collector(
        backend,
        host=host,
        interval_s=settings.interval_s,
        spool=spool,
        seq=SeqCounter(settings.state_dir / f"seq-{host}", fsync=settings.spool_fsync),
        metrics=metrics,
        clock=clock,
        sender=sender,
        resolver=resolver,
        shutdown_timeout_s=settings.shutdown_timeout_s,
        max_ticks=max_ticks,
        on_snapshot=on_snapshot,
    )
