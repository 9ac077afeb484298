"""Where a simulation's VC sizes come from.

1. a ``vc,node num`` file (``--vcs``; Philly's ``philly_vc.csv``), matched to the trace's
   tenants with or without their ``vc_`` prefix;
2. else ``nodes`` (``--nodes``) split over the tenants: each first gets the nodes of its
   largest job, the rest by share of the trace's GPU-time (largest remainder); ``nodes``
   below the sum of those first shares is an error;
3. else ``philly_vc.csv`` beside the jobs file, if there is one.

Example:
    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> recs = [JobRecord("0", "a", 8, 0.0, 300.0, "", 2),
    ...         JobRecord("1", "b", 1, 0.0, 100.0, "", 3)]
    >>> split_nodes(recs, 10, node_gpus=8)
    {'a': 9, 'b': 1}
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dprobe.errors import UsageError
from dprobe.traces.jobs_csv import JobRecord, read_vc_nodes, vc_key


def vc_nodes_from_file(records: Sequence[JobRecord], path: str | Path) -> dict[str, int]:
    """Nodes per VC from a VC file, named as the trace names them; every tenant of the
    trace must be in the file, and VCs of the file without jobs are kept (they lend)."""
    sizes = read_vc_nodes(path)
    out: dict[str, int] = {}
    used: set[str] = set()
    for tenant in sorted({r.tenant for r in records}):
        key = tenant if tenant in sizes else vc_key(tenant)
        if key not in sizes:
            raise UsageError(f"{path}: no VC size for tenant {tenant!r} of the trace")
        out[tenant] = sizes[key]
        used.add(key)
    for name, nodes in sizes.items():
        if name not in used:
            out[name] = nodes
    return dict(sorted(out.items()))


def split_nodes(records: Sequence[JobRecord], nodes: int, *, node_gpus: int) -> dict[str, int]:
    """``nodes`` split by GPU-time share (see module doc).

    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> split_nodes([JobRecord("0", "a", 16, 0.0, 60.0, "", 2)], 1, node_gpus=8)
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: --nodes 1 is too few: the jobs need at least 2 nodes ...
    """
    work: dict[str, float] = defaultdict(float)
    biggest: dict[str, int] = defaultdict(int)
    for r in records:
        if r.num_gpu > 0:
            work[r.tenant] += r.num_gpu * r.duration_s
            biggest[r.tenant] = max(biggest[r.tenant], math.ceil(r.num_gpu / node_gpus))
    total = sum(work.values())
    if not total:
        raise UsageError("the trace has no GPU jobs")
    least = sum(biggest.values())
    if nodes < least:
        raise UsageError(
            f"--nodes {nodes} is too few: the jobs need at least {least} "
            f"node{'' if least == 1 else 's'} "
            f"(each VC the nodes of its largest job, {node_gpus} GPUs a node)"
        )
    rest = nodes - least
    exact = {t: biggest[t] + rest * w / total for t, w in work.items()}
    out = {t: math.floor(v) for t, v in exact.items()}
    for t in sorted(exact, key=lambda t: (out[t] - exact[t], t))[: nodes - sum(out.values())]:
        out[t] += 1
    return dict(sorted(out.items()))


def scale_nodes(vc_nodes: dict[str, int], factor: float) -> dict[str, int]:
    """Every VC's nodes x ``factor``, rounded, at least 1 (a smaller or larger cluster).

    >>> scale_nodes({"a": 64, "b": 8, "c": 1}, 0.5)
    {'a': 32, 'b': 4, 'c': 1}
    """
    if not factor > 0:
        raise UsageError("the node scale must be > 0")
    return {t: max(1, round(n * factor)) for t, n in vc_nodes.items()}


def pool_vcs(
    records: Sequence[JobRecord], vc_nodes: dict[str, int], name: str = "pool"
) -> tuple[list[JobRecord], dict[str, int]]:
    """Every job in one VC that holds every node: the cluster without VC boundaries.

    Run with static quotas, it is a reference for what partitioning the cluster costs
    (every job may use any free GPU at once, no move ever waits); a quota planner moves
    whole idle nodes between VCs, so it approaches this without reaching it.

    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> recs, nodes = pool_vcs([JobRecord("0", "a", 8, 0.0, 60.0, "", 2)], {"a": 2, "b": 3})
    >>> [r.tenant for r in recs], nodes
    (['pool'], {'pool': 5})
    """
    return [replace(r, tenant=name) for r in records], {name: sum(vc_nodes.values())}


def resolve_vc_nodes(
    records: Sequence[JobRecord],
    jobs_path: Path | None,
    vcs: Path | None,
    nodes: int | None,
    *,
    node_gpus: int,
) -> tuple[dict[str, int], str]:
    """VC sizes and a line saying where they came from."""
    if vcs is not None:
        return vc_nodes_from_file(records, vcs), f"VC sizes from {vcs}"
    beside = jobs_path.with_name("philly_vc.csv") if jobs_path is not None else None
    if nodes is None and beside is not None and beside.is_file():
        return vc_nodes_from_file(records, beside), f"VC sizes from {beside} (beside the jobs file)"
    if nodes is None:
        raise UsageError("give the VC sizes: --vcs FILE (vc,node num) or --nodes N")
    return split_nodes(records, nodes, node_gpus=node_gpus), (
        f"{nodes} nodes split over the VCs by their share of GPU-time"
    )
