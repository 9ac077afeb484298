"""Turn dprobe ScalingEvents into Kueue ClusterQueue ``nominalQuota`` patches (printed).

Each event sets the GPU ``nominalQuota`` of its tenant's ClusterQueue to the event's
``target_quota_gpus``. A plan is applied only as a whole: events are buffered by
``plan_id`` until their deltas sum to zero, then the plan's patches are printed, quota
given back first (scale_down), then quota granted (scale_up), so the cohort never holds
more than before. Duplicate ``event_id`` s are dropped. Patches carry absolute targets, so
applying one twice (after a restart) is harmless. Nothing here talks to a cluster: pipe
the printed ``kubectl`` lines into ``sh`` when you trust them.

The patch is a JSON merge patch, and merge patches replace lists whole: it sets the
ClusterQueue's ``resourceGroups`` to one group covering only ``nvidia.com/gpu`` in one
flavor (``--flavor``). That fits ClusterQueues that hold GPU quota only; for queues that
also cover CPU or memory, extend :func:`cluster_queue_patch` with their full groups.

Usage:
    python examples/kueue_quota_consumer.py --bootstrap 127.0.0.1:9092 \\
        --queue-map vc-a=team-a,vc-b=team-b --flavor a100
    dprobe events --json --from-beginning --timeout 5 | \\
        python examples/kueue_quota_consumer.py --stdin

Example:
    >>> print(kubectl_line("team-a", cluster_queue_patch(16, flavor="a100")))
    kubectl patch clusterqueue team-a --type=merge -p '{"spec":{"resourceGroups":[{"coveredResources":["nvidia.com/gpu"],"flavors":[{"name":"a100","resources":[{"name":"nvidia.com/gpu","nominalQuota":16}]}]}]}}'
"""  # noqa: E501

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dprobe.schema import ScalingEvent, SchemaError, decode_scaling_event
from dprobe.sinks.seen_ids import SeenIds

log = logging.getLogger("kueue_quota_consumer")

GPU = "nvidia.com/gpu"
DEFAULT_FLAVOR = "default-flavor"


def cluster_queue_patch(target_gpus: float, *, flavor: str, resource: str = GPU) -> dict[str, Any]:
    """JSON merge patch setting the ClusterQueue's GPU ``nominalQuota`` to ``target_gpus``.

    GPUs are an extended resource: whole numbers only (``ValueError`` otherwise).

    >>> cluster_queue_patch(8.0, flavor="h100")["spec"]["resourceGroups"][0]["flavors"]
    [{'name': 'h100', 'resources': [{'name': 'nvidia.com/gpu', 'nominalQuota': 8}]}]
    """
    if target_gpus < 0 or not float(target_gpus).is_integer():
        raise ValueError(f"{resource} quota must be a whole, non-negative number: {target_gpus}")
    quota = {"name": resource, "nominalQuota": int(target_gpus)}
    group = {"coveredResources": [resource], "flavors": [{"name": flavor, "resources": [quota]}]}
    return {"spec": {"resourceGroups": [group]}}


def kubectl_line(cluster_queue: str, patch: Mapping[str, Any]) -> str:
    """The ``kubectl patch`` command applying ``patch`` to ``cluster_queue`` (shell-quoted)."""
    body = json.dumps(patch, separators=(",", ":"))
    return f"kubectl patch clusterqueue {shlex.quote(cluster_queue)} --type=merge -p {shlex.quote(body)}"  # noqa: E501


def plan_commands(
    events: Iterable[ScalingEvent], *, queue_for: Mapping[str, str], flavor: str
) -> list[str]:
    """``kubectl`` lines for one balanced plan: scale_down first, then scale_up.

    ``queue_for`` maps tenant -> ClusterQueue; a tenant not in it keeps its own name.
    """
    ordered = sorted(events, key=lambda e: (e.delta_gpus > 0, e.tenant))
    return [
        kubectl_line(queue_for.get(e.tenant, e.tenant), cluster_queue_patch(e.target_quota_gpus,
                     flavor=flavor, resource=e.resource))
        for e in ordered
    ]  # fmt: skip


@dataclass
class PlanAssembler:
    """Buffers events by ``plan_id`` and releases a plan once its deltas sum to zero.

    Duplicate ``event_id`` s are dropped. A plan still unbalanced after ``max_age_s`` (its
    other events lost or never produced) is dropped with a warning, never applied in part.

    >>> from dprobe.schema import Forecast, ModelInfo
    >>> def ev(i, tenant, cur, tgt):
    ...     return ScalingEvent(event_id=i, plan_id="p1", ts=1.0, time="", tenant=tenant,
    ...         action="scale_up" if tgt > cur else "scale_down", current_quota_gpus=cur,
    ...         target_quota_gpus=tgt, delta_gpus=tgt - cur, reason="r", message="",
    ...         forecast=Forecast(horizon_s=600, p50=1, p90=1), model=ModelInfo(name="m",
    ...         version="1"))
    >>> plans = PlanAssembler()
    >>> plans.add(ev("e1", "vc-a", 8, 16)), plans.pending_plans
    ([], 1)
    >>> [e.tenant for e in plans.add(ev("e2", "vc-b", 16, 8))], plans.pending_plans
    (['vc-a', 'vc-b'], 0)
    """

    max_age_s: float = 300.0
    clock: Callable[[], float] = time.monotonic
    seen: SeenIds = field(default_factory=SeenIds)
    duplicates: int = 0
    expired: int = 0
    _pending: dict[str, tuple[float, list[ScalingEvent]]] = field(default_factory=dict)

    @property
    def pending_plans(self) -> int:
        return len(self._pending)

    def add(self, event: ScalingEvent) -> list[ScalingEvent]:
        """Add one event; return the events of the plan it completes (else ``[]``)."""
        self.expire()
        if not self.seen.add(event.event_id):
            self.duplicates += 1
            return []
        _, events = self._pending.setdefault(event.plan_id, (self.clock(), []))
        events.append(event)
        if len(events) >= 2 and abs(sum(e.delta_gpus for e in events)) < 1e-6:
            del self._pending[event.plan_id]
            return events
        return []

    def expire(self) -> list[str]:
        """Drop plans older than ``max_age_s``; return their ids."""
        now = self.clock()
        old = [p for p, (t, _) in self._pending.items() if now - t > self.max_age_s]
        for plan_id in old:
            _, events = self._pending.pop(plan_id)
            self.expired += 1
            log.warning("plan %s never balanced (%d events); not applied", plan_id, len(events))
        return old


def parse_queue_map(text: str) -> dict[str, str]:
    """``"vc-a=team-a,vc-b=team-b"`` -> ``{"vc-a": "team-a", "vc-b": "team-b"}``.

    >>> parse_queue_map("vc-a=team-a, vc-b=team-b")
    {'vc-a': 'team-a', 'vc-b': 'team-b'}
    """
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        tenant, sep, queue = item.partition("=")
        if not sep or not tenant.strip() or not queue.strip():
            raise ValueError(f"expected TENANT=CLUSTERQUEUE, got {item!r}")
        out[tenant.strip()] = queue.strip()
    return out


class Printer:
    """Feeds raw records to a :class:`PlanAssembler` and prints each balanced plan."""

    def __init__(self, plans: PlanAssembler, queue_for: Mapping[str, str], flavor: str) -> None:
        self.plans, self.queue_for, self.flavor = plans, queue_for, flavor
        self.applied = 0

    def feed(self, raw: bytes) -> None:
        try:
            event = decode_scaling_event(raw)
        except SchemaError as exc:
            log.warning("skipping an invalid event: %s", exc)
            return
        events = self.plans.add(event)
        if not events:
            return
        try:
            lines = plan_commands(events, queue_for=self.queue_for, flavor=self.flavor)
        except ValueError as exc:
            log.warning("plan %s not applied: %s", event.plan_id, exc)
            return
        moves = ", ".join(f"{e.tenant} {e.delta_gpus:+g}" for e in events)
        print(f"# plan {event.plan_id}: {moves}", *lines, sep="\n", flush=True)
        self.applied += 1


async def consume(args: argparse.Namespace, printer: Printer) -> None:
    """Read the topic; commit only when no plan is half-received (all read was handled)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
    )
    await consumer.start()
    try:
        while args.max_plans is None or printer.applied < args.max_plans:
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                for record in records:
                    printer.feed(record.value)
            printer.plans.expire()
            if batch and printer.plans.pending_plans == 0:
                await consumer.commit()
    finally:
        await consumer.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--topic", default="dprobe.scaling-events")
    p.add_argument("--group", default="kueue-quota-consumer")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--queue-map", default="", help="TENANT=CLUSTERQUEUE,... (default: same name)")
    p.add_argument("--flavor", default=DEFAULT_FLAVOR, help="Kueue ResourceFlavor of the GPUs")
    p.add_argument("--plan-timeout", type=float, default=300.0, help="drop unbalanced plans (s)")
    p.add_argument("--max-plans", type=int, help="stop after this many plans")
    p.add_argument("--stdin", action="store_true", help="read JSON lines from stdin, not Kafka")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    try:
        queue_for = parse_queue_map(args.queue_map)
    except ValueError as exc:
        p.error(str(exc))
    printer = Printer(PlanAssembler(max_age_s=args.plan_timeout), queue_for, args.flavor)
    if args.stdin:
        for line in sys.stdin.buffer:
            if line.strip():
                printer.feed(line.strip())
    else:
        try:
            asyncio.run(consume(args, printer))
        except KeyboardInterrupt:
            log.info("interrupted")
    plans = printer.plans
    log.info(
        "%d plans printed, %d duplicates dropped, %d plans incomplete or expired",
        printer.applied, plans.duplicates, plans.expired + plans.pending_plans,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
