"""Per-node GPU telemetry: backends, pid -> tenant attribution, and the collector service.

Modules, one job each:

- ``backend``: the :class:`GpuBackend` contract and raw readings
- ``nvml`` (+ ``nvml_errors``): NVML on a dedicated thread; ``fake_nvml``: a test stand-in
- ``synthetic``: a seeded workload generator (job footprints from
  :mod:`dprobe.models.profiles`)
- ``cgroup``, ``tenant_map``, ``tenants``: who a GPU process belongs to
- ``snapshot``: clean a reading into a :class:`dprobe.schema.HostSnapshot`
- ``spool``, ``seq``: the disk spool and the persisted per-host counter
- ``sender``: spool -> Kafka; ``service``: the tick loop; ``metrics``: its Prometheus metrics
- ``assemble``: build a collector from :class:`dprobe.config.CollectorSettings`

Clocks (real, accelerated, manual) come from :mod:`dprobe.clock`.

Example:
    >>> from dprobe.collectors.synthetic import SyntheticBackend
    >>> SyntheticBackend(host="h1", tenants=["vc-a"], gpus=2, seed=0).read_at(1.7e9).gpus[0].index
    0
"""
