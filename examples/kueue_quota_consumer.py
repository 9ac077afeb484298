"""Turn dprobe ScalingEvents into Kueue ClusterQueue ``nominalQuota`` patches (printed).

Each event sets the GPU ``nominalQuota`` of its tenant's ClusterQueue to the event's
``target_quota_gpus``. A plan is applied only as a whole and in plan order
(:class:`~dprobe.sinks.plan_order.PlanAssembler`): events are buffered by ``plan_id``
until all ``plan_size`` of them are in, then the plan's patches are printed, quota given
back first (scale_down), then quota granted (scale_up), so the cohort never holds more
than before; a plan older than one already applied changes only the tenants no newer
plan has set, so each queue ends at its newest target. Duplicate ``event_id`` s are
dropped. Patches carry absolute targets, so
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
from collections.abc import Iterable, Mapping
from typing import Any

from dprobe.schema import ScalingEvent, SchemaError, decode_scaling_event
from dprobe.sinks.plan_order import PlanAssembler

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
        isolation_level="read_committed",  # what the worker's transactions committed
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
