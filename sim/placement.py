"""What a VC needs now in whole nodes, from its busy nodes and its waiting jobs.

Example:
    >>> from dprobe.sim.cluster import Node
    >>> vc = VC("a", 8)
    >>> vc.add_node(Node(0, 8))
    >>> need_nodes(vc)  # nothing runs, nothing waits
    0
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from dprobe.sim.cluster import VC


def need_gpus(vc: VC, max_jobs: int = 512, extra: Iterable[int] = ()) -> int:
    """What ``vc`` needs now in whole nodes: its busy nodes, plus new nodes for its waiting
    jobs (the first ``max_jobs`` in queue order) and for jobs of ``extra`` GPUs (jobs known
    to arrive soon), packed best-fit largest first into the free GPUs of busy nodes and
    then into new nodes; a job larger than a node takes whole nodes. Nodes draining away
    to their home VC do not count.

    >>> from dprobe.sim.cluster import Node
    >>> from dprobe.sim.jobs import SimJob
    >>> vc = VC("a", 8)
    >>> for i in range(3): vc.add_node(Node(i, 8))
    >>> for i in range(3): vc.allocate(f"run{i}", [(vc.nodes[i], 6)])  # 2 free on each
    >>> vc.enqueue((0,), SimJob(0, "a", gpus=4, submit_s=0.0, duration_s=1.0))
    >>> need_gpus(vc)  # 3 busy nodes + 1 new: the 4 GPUs do not fit in 2+2+2
    32
    """
    g = vc.node_gpus
    frees = sorted(n.free for n in vc.nodes.values() if n.jobs and not n.draining)
    busy = len(frees)
    new = 0
    sizes = [j.gpus for _, j in vc.pending[:max_jobs]]
    sizes.extend(extra)
    for size in sorted(sizes, reverse=True):
        if size > g:
            new += -(-size // g)
            continue
        k = bisect.bisect_left(frees, size)
        if k == len(frees):
            new += 1
            bisect.insort(frees, g - size)
        else:
            bisect.insort(frees, frees.pop(k) - size)
    return (busy + new) * g


def need_nodes(vc: VC, extra: Iterable[int] = ()) -> int:
    """:func:`need_gpus` in whole nodes."""
    return need_gpus(vc, extra=extra) // vc.node_gpus
