"""Nodes, virtual clusters and placement: jobs of up to one node's GPUs on one node
(best fit: the fullest node that fits, then the lowest node id), larger jobs on whole
free nodes (lowest ids first).

Example:
    >>> vc = VC("a", node_gpus=8)
    >>> for i in range(2): vc.add_node(Node(i, 8))
    >>> slot = vc.find_slot(3)
    >>> [(n.idx, g) for n, g in slot]
    [(0, 3)]
    >>> vc.allocate("job-1", slot)
    >>> [(n.idx, g) for n, g in vc.find_slot(5)]  # best fit: the fuller node
    [(0, 5)]
    >>> print(vc.find_slot(12))  # needs two whole free nodes
    None
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

Slot = list[tuple["Node", int]]


class Node:
    """One machine of ``gpus`` GPUs; ``jobs`` maps a running job to the GPUs it holds here."""

    __slots__ = ("draining", "free", "gpus", "home", "idle_since", "idx", "jobs", "owner", "solo")

    def __init__(self, idx: int, gpus: int) -> None:
        self.idx = idx
        self.gpus = gpus
        self.free = gpus
        self.jobs: dict[Any, int] = {}
        self.owner = ""  # the VC it belongs to now ("" while it moves)
        self.home = ""  # the VC whose static quota it is part of
        self.draining = False  # recalled home: runs what it runs, takes nothing new
        self.idle_since = 0.0
        self.solo: list[Any] = []  # sharing: low-level jobs alone on their GPU

    def __repr__(self) -> str:
        return f"Node({self.idx}, {self.free}/{self.gpus} free, {self.owner})"


class VC:
    """A virtual cluster: the nodes it owns now, its waiting jobs (sorted) and running set.

    Nodes on their way to it (``in_flight``) and its own nodes draining back to it from a
    borrower (``recalling``) count in its quota but run nothing yet; a node of its own it
    holds but is draining away to its home (``draining``) no longer counts. ``away`` is
    the number of its static (home) nodes that are not serving it now.
    """

    def __init__(self, name: str, node_gpus: int) -> None:
        self.name = name
        self.node_gpus = node_gpus
        self.nodes: dict[int, Node] = {}
        self.by_free: list[set[int]] = [set() for _ in range(node_gpus + 1)]
        self.pending: list[tuple[tuple[float, ...], Any]] = []
        self.running: set[Any] = set()
        self.pending_gpus = 0
        self.running_gpus = 0
        self.guaranteed_nodes = 0
        self.static_nodes = 0
        self.in_flight: dict[int, Node] = {}
        self.recalling = 0
        self.draining = 0
        self.away = 0
        self._away_acc = 0.0
        self._away_since = 0.0

    # --- nodes -----------------------------------------------------------------
    def add_node(self, node: Node) -> None:
        node.owner = self.name
        self.nodes[node.idx] = node
        self.by_free[node.free].add(node.idx)

    def remove_node(self, node: Node) -> None:
        if node.jobs:
            raise ValueError(f"node {node.idx} is busy; only idle nodes move")
        del self.nodes[node.idx]
        self.by_free[node.free].discard(node.idx)
        if node.draining:
            node.draining = False
            self.draining -= 1
        node.owner = ""

    def drain(self, node: Node) -> None:
        """Recalled by its home: ``node`` takes no new job here and leaves once idle."""
        if not node.draining:
            node.draining = True
            self.draining += 1
            self.by_free[node.free].discard(node.idx)

    @property
    def have_nodes(self) -> int:
        """Nodes it holds or has coming: landed (not draining away), in flight, recalled."""
        return len(self.nodes) - self.draining + len(self.in_flight) + self.recalling

    def set_away(self, delta: int, now: float) -> None:
        """``delta`` more (or fewer) of its home nodes are away from it from ``now`` on."""
        if self.away > 0:
            self._away_acc += now - self._away_since
        self._away_since = now
        self.away += delta

    def away_clock(self, now: float) -> float:
        """Total time up to ``now`` during which any of its home nodes were away."""
        return self._away_acc + (now - self._away_since if self.away > 0 else 0.0)

    def idle_nodes(self) -> list[Node]:
        """Nodes that run nothing, highest id first (the ones lent first)."""
        return [
            self.nodes[i]
            for i in sorted(self.by_free[self.node_gpus], reverse=True)
            if not self.nodes[i].jobs
        ]

    @property
    def free_gpus(self) -> int:
        return sum(f * len(s) for f, s in enumerate(self.by_free))

    @property
    def quota_gpus(self) -> int:
        return self.have_nodes * self.node_gpus

    # --- placement -------------------------------------------------------------
    def find_slot(self, gpus: int) -> Slot | None:
        """Where ``gpus`` GPUs fit now, or ``None``."""
        if gpus <= self.node_gpus:
            for f in range(gpus, self.node_gpus + 1):
                if self.by_free[f]:
                    return [(self.nodes[min(self.by_free[f])], gpus)]
            return None
        k = -(-gpus // self.node_gpus)
        whole = self.by_free[self.node_gpus]
        if len(whole) < k:
            return None
        return [(self.nodes[i], self.node_gpus) for i in sorted(whole)[:k]]

    def _set_free(self, node: Node, free: int) -> None:
        self.by_free[node.free].discard(node.idx)
        node.free = free
        if not node.draining:
            self.by_free[free].add(node.idx)

    def allocate(self, job: Any, slot: Slot) -> None:
        for node, g in slot:
            node.jobs[job] = node.jobs.get(job, 0) + g
            self._set_free(node, node.free - g)

    def release(self, job: Any, slot: Slot) -> None:
        for node, g in slot:
            left = node.jobs.pop(job) - g
            if left:
                node.jobs[job] = left
            self._set_free(node, node.free + g)

    # --- waiting jobs ------------------------------------------------------------
    def enqueue(self, key: tuple[float, ...], job: Any) -> None:
        bisect.insort(self.pending, (key, job), key=lambda e: e[0])

    # --- preemption ------------------------------------------------------------
    def find_victims(
        self, gpus: int, rank: Callable[[Any], tuple[float, ...]], bar: tuple[float, ...]
    ) -> list[Any] | None:
        """Running jobs ranked after ``bar`` (``rank(job) > bar``) whose preemption makes
        room for ``gpus`` GPUs, lowest-ranked first, on the node needing the fewest GPUs
        stopped (ties: lowest id); whole nodes for multi-node jobs. ``None``: no room."""

        def lower(j: Any) -> bool:
            return rank(j) > bar

        if gpus <= self.node_gpus:
            best: tuple[int, int, list[Any]] | None = None
            for node in self.nodes.values():
                if node.draining or (
                    any(not lower(j) for j in node.jobs)
                    and node.free + sum(g for j, g in node.jobs.items() if lower(j)) < gpus
                ):
                    continue
                cand = sorted((j for j in node.jobs if lower(j)), key=rank, reverse=True)
                freed, chosen = node.free, []
                for j in cand:
                    if freed >= gpus:
                        break
                    freed += node.jobs[j]
                    chosen.append(j)
                if freed < gpus:
                    continue
                cost = sum(node.jobs[j] for j in chosen)
                if best is None or (cost, node.idx) < best[:2]:
                    best = (cost, node.idx, chosen)
            return None if best is None else best[2]
        k = -(-gpus // self.node_gpus)
        clearable = sorted(
            (sum(n.jobs.values()), n.idx, list(n.jobs))
            for n in self.nodes.values()
            if not n.draining and all(lower(j) for j in n.jobs)
        )
        if len(clearable) < k:
            return None
        victims: list[Any] = []
        for _, _, js in clearable[:k]:
            victims.extend(j for j in js if j not in victims)
        return victims
