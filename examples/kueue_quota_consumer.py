"""Apply dprobe ScalingEvents to Kueue: each move sets one ClusterQueue's GPU nominalQuota.

Each event sets the ``nominalQuota`` of ``nvidia.com/gpu`` in one ResourceFlavor
(``--flavor``) of its tenant's ClusterQueue to the event's ``target_quota_gpus``. Nothing
else changes: other flavors, other resources (CPU, memory), ``borrowingLimit`` and
``lendingLimit`` stay as they are, except that a ``lendingLimit`` above the new
``nominalQuota`` is lowered to it (Kueue refuses a ``lendingLimit`` above the
``nominalQuota``). Kueue declares ``spec.resourceGroups`` an atomic list, so a merge patch
would replace all of it; instead each change reads the ClusterQueue (``kubectl get
clusterqueue NAME -o json``) and writes a JSON patch (RFC 6902) that changes that one
entry after testing the ``resourceVersion`` it read: a change made in between makes the
patch fail instead of being overwritten.

Plans are applied whole and in plan order
(:class:`~dprobe.sinks.plan_order.PlanAssembler`): events are buffered by ``plan_id``
until all ``plan_size`` of them are in; then quota is given back first (scale_down) and
granted after (scale_up), so the cohort never holds more than before. Duplicate
``event_id`` s are dropped. Targets are absolute, so applying a plan twice is harmless.

Tenants map to ClusterQueues through ``--queue-map vc-a=team-a,...``; ``--known-queues
team-c,...`` lists ClusterQueues named like their tenant. A plan that names a tenant with
neither is refused whole: nothing of it runs, and the consumer stops with exit status 1,
because later plans build on it (skipping it could raise the total above the capacity).
Fix the map and run again.

Modes:

- ``--stdin``: reads events as JSON lines and prints a shell script, one ``set -e`` block
  per plan with one ``--set-quota`` call of this script per move, donors first. Piped to
  ``sh``, the first failure stops the rest, the receivers of that plan included: quota is
  then missing until you fix the cause and run the script again, never created. A plan
  still incomplete when the input ends is dropped with a warning (never printed in part),
  and the later plans it held back are printed.
- Kafka (the default): with ``--apply`` it applies each plan itself and commits the
  offsets of each plan once its changes all succeeded and no plan is half-received; a
  failure stops it with exit status 1 and that plan not committed, so the next run applies
  it again, not the plans applied before it (unless one was applied while a later plan was
  half-received, as events of plans interleaved over several partitions can be; its
  targets are absolute, so that plan only sets again what it set). A
  group's first run commits where it starts, the newest record or with
  ``--from-beginning`` the oldest, before it applies anything. Without ``--apply`` it
  prints the script and commits nothing.
- ``--set-quota QUEUE=GPUS``: one change, as the printed script calls it.

Usage:
    python examples/kueue_quota_consumer.py --bootstrap 127.0.0.1:9092 --apply \\
        --queue-map vc-a=team-a,vc-b=team-b --flavor a100
    dprobe events --json --from-beginning --timeout 5 | \\
        python examples/kueue_quota_consumer.py --stdin --known-queues vc-a,vc-b --flavor a100 | sh

Example (a ClusterQueue with 16 GPUs, 12 of them lendable, set to 8):
    >>> cq = {"metadata": {"name": "team-a", "resourceVersion": "41"}, "spec": {
    ...     "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{
    ...         "name": "a100", "resources": [{"name": "nvidia.com/gpu",
    ...         "nominalQuota": "16", "lendingLimit": "12"}]}]}]}}
    >>> for op in quota_patch(cq, 8, flavor="a100"):
    ...     print(op)
    {'op': 'test', 'path': '/metadata/resourceVersion', 'value': '41'}
    {'op': 'replace', 'path': '/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota', 'value': 8}
    {'op': 'replace', 'path': '/spec/resourceGroups/0/flavors/0/resources/0/lendingLimit', 'value': 8}
"""  # noqa: E501

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from dprobe.consumer_start import commit_start
from dprobe.schema import ScalingEvent, SchemaError, decode_scaling_event
from dprobe.sinks.plan_order import PlanAssembler

log = logging.getLogger("kueue_quota_consumer")

GPU = "nvidia.com/gpu"
DEFAULT_FLAVOR = "default-flavor"
SCRIPT = Path(__file__).resolve()


class PlanRefused(Exception):
    """A plan that cannot be applied whole (a tenant without ClusterQueue, a bad target)."""


class ApplyError(Exception):
    """A change that did not happen (kubectl failed, the ClusterQueue changed meanwhile)."""


# Kubernetes quantity grammar: <signedNumber><suffix>, the suffix binary SI (Ki...),
# decimal SI (m, "", k, M...) or a decimal exponent (e3, E-2). Same as kueue_cluster_report.
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[mkMGTPE]?)")
_SUFFIX: dict[str, int | Fraction] = {"": 1, "m": Fraction(1, 1000)}
_SUFFIX |= {s: 1000 ** (i + 1) for i, s in enumerate("kMGTPE")}
_SUFFIX |= {f"{s}i": 1024 ** (i + 1) for i, s in enumerate("KMGTPE")}


def quantity(value: Any) -> Fraction:
    """A Kubernetes quantity (``16``, ``"1k"``, ``"2Ki"``, ``"500m"``, ``"1e3"``), exactly.

    >>> [str(quantity(q)) for q in (16, "1k", "2Ki", "500m", "1e3", "1.5")]
    ['16', '1000', '2048', '1/2', '1000', '3/2']
    """
    match = _QUANTITY.fullmatch(str(value).strip())  # True, None, "inf": no match
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = match.groups()
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise ValueError(f"quantity out of range: {value!r}")
        return Fraction(number) * Fraction(10) ** exponent
    return Fraction(number) * _SUFFIX[suffix]


def whole_gpus(target: float, resource: str = GPU) -> int:
    """GPUs are an extended resource: whole, non-negative numbers only (``ValueError``)."""
    if target < 0 or not float(target).is_integer():
        raise ValueError(f"{resource} quota must be a whole, non-negative number: {target}")
    return int(target)


def quota_patch(
    cluster_queue: Mapping[str, Any], gpus: int, *, flavor: str, resource: str = GPU
) -> list[dict[str, Any]]:
    """JSON patch setting ``resource``'s ``nominalQuota`` in ``flavor`` to ``gpus``.

    Only that entry changes (and its ``lendingLimit``, lowered to ``gpus`` when above). The
    first operation tests the ``resourceVersion`` read, or, without one, the old values.
    ``[]`` when the ClusterQueue already holds ``gpus``; ``ValueError`` when it has no
    quota of ``resource`` in ``flavor`` (add it by hand: every flavor of a resource group
    must list the group's resources).
    """
    name = cluster_queue.get("metadata", {}).get("name", "?")
    groups = cluster_queue.get("spec", {}).get("resourceGroups") or ()
    for g, group in enumerate(groups):
        for f, fl in enumerate(group.get("flavors") or ()):
            if fl.get("name") != flavor:
                continue
            for r, res in enumerate(fl.get("resources") or ()):
                if res.get("name") == resource:
                    path = f"/spec/resourceGroups/{g}/flavors/{f}/resources/{r}"
                    return _entry_patch(cluster_queue, path, res, gpus)
    raise ValueError(f"ClusterQueue {name} has no {resource} quota in flavor {flavor}")


def _entry_patch(
    cluster_queue: Mapping[str, Any], path: str, entry: Mapping[str, Any], gpus: int
) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    guard: list[dict[str, Any]] = []
    nominal = entry.get("nominalQuota", 0)
    if quantity(nominal) != gpus:
        changes.append({"op": "replace", "path": f"{path}/nominalQuota", "value": gpus})
    guard.append({"op": "test", "path": f"{path}/nominalQuota", "value": nominal})
    lending = entry.get("lendingLimit")
    if lending is not None:
        if quantity(lending) > gpus:
            changes.append({"op": "replace", "path": f"{path}/lendingLimit", "value": gpus})
        guard.append({"op": "test", "path": f"{path}/lendingLimit", "value": lending})
    if not changes:
        return []
    version = cluster_queue.get("metadata", {}).get("resourceVersion")
    if version:
        guard = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}]
    return guard + changes


def _kubectl(kubectl: Sequence[str], *args: str) -> str:
    cmd = [*kubectl, *args]
    try:
        done = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ApplyError(f"{shlex.join(cmd[:4])}: {exc}") from exc
    if done.returncode != 0:
        raise ApplyError(f"{shlex.join(cmd[:4])} failed: {done.stderr.strip()}")
    return done.stdout


def set_quota(
    queue: str,
    gpus: int,
    *,
    flavor: str,
    kubectl: Sequence[str] = ("kubectl",),
    resource: str = GPU,
) -> bool:
    """Read ClusterQueue ``queue`` and set its quota to ``gpus``; ``False``: it had it.

    ``ApplyError`` when kubectl fails, which includes a ClusterQueue changed between the
    read and the write.
    """
    try:
        cluster_queue = json.loads(_kubectl(kubectl, "get", "clusterqueue", queue, "-o", "json"))
        patch = quota_patch(cluster_queue, gpus, flavor=flavor, resource=resource)
    except ValueError as exc:
        raise ApplyError(str(exc)) from exc
    if not patch:
        return False
    body = json.dumps(patch, separators=(",", ":"))
    _kubectl(kubectl, "patch", "clusterqueue", queue, "--type=json", "-p", body)
    return True


class Move(NamedTuple):
    queue: str
    gpus: int
    event: ScalingEvent


def plan_moves(
    events: Iterable[ScalingEvent],
    *,
    queue_for: Mapping[str, str],
    known_queues: Collection[str] = (),
) -> list[Move]:
    """The moves of one plan, quota given back (scale_down) first.

    A tenant's ClusterQueue is its ``queue_for`` entry, else its own name when that is in
    ``known_queues``. ``PlanRefused`` when a tenant has neither, or a target is not whole
    GPUs: the plan is then not applied at all.
    """
    ordered = sorted(events, key=lambda e: (e.delta_gpus > 0, e.tenant))
    plan_id = ordered[0].plan_id if ordered else "?"
    missing = sorted(
        {e.tenant for e in ordered if e.tenant not in queue_for and e.tenant not in known_queues}
    )
    if missing:
        raise PlanRefused(
            f"plan {plan_id} refused, nothing of it applied: no ClusterQueue for tenant(s) "
            f"{', '.join(missing)} (add them to --queue-map, or to --known-queues where the "
            "ClusterQueue has the tenant's name)"
        )
    try:
        moves = [
            Move(queue_for.get(e.tenant, e.tenant), whole_gpus(e.target_quota_gpus, e.resource), e)
            for e in ordered
        ]
    except ValueError as exc:
        raise PlanRefused(f"plan {plan_id} refused, nothing of it applied: {exc}") from exc
    tenants_of: dict[str, list[str]] = {}
    for m in moves:
        tenants_of.setdefault(m.queue, []).append(m.event.tenant)
    shared = {q: ts for q, ts in tenants_of.items() if len(ts) > 1}
    if shared:  # the last move would silently win over the other
        raise PlanRefused(
            f"plan {plan_id} refused, nothing of it applied: "
            + "; ".join(
                f"tenants {', '.join(ts)} share ClusterQueue {q}" for q, ts in shared.items()
            )
            + " (each tenant needs a ClusterQueue of its own: check --queue-map and --known-queues)"
        )
    return moves


def set_quota_command(move: Move, *, flavor: str, kubectl: Sequence[str] = ("kubectl",)) -> str:
    """The shell line applying ``move`` (a ``--set-quota`` call of this script)."""
    argv = [sys.executable, str(SCRIPT), "--flavor", flavor]
    if list(kubectl) != ["kubectl"]:
        argv += ["--kubectl", shlex.join(kubectl)]
    if move.event.resource != GPU:
        argv += ["--resource", move.event.resource]
    return shlex.join([*argv, "--set-quota", f"{move.queue}={move.gpus}"])


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
        before = out.setdefault(tenant.strip(), queue.strip())
        if before != queue.strip():  # a move sets one ClusterQueue
            raise ValueError(
                f"tenant {tenant.strip()} is mapped to ClusterQueues {before}, {queue.strip()}:"
                " a tenant's quota is one ClusterQueue's"
            )
    return out


def shared_queues(queue_for: Mapping[str, str], known: Collection[str]) -> dict[str, list[str]]:
    """ClusterQueue -> its tenants, for each queue that more than one tenant would set
    (a tenant in ``known`` has the queue of its name unless ``queue_for`` maps it).

    >>> shared_queues({"vc-a": "team-a", "vc-b": "team-a"}, {"vc-c"})
    {'team-a': ['vc-a', 'vc-b']}
    >>> shared_queues({"vc-a": "vc-c"}, {"vc-c"})
    {'vc-c': ['vc-a', 'vc-c']}
    """
    tenants_of: dict[str, list[str]] = {}
    for tenant, queue in queue_for.items():
        tenants_of.setdefault(queue, []).append(tenant)
    for queue in known:
        if queue not in queue_for:
            tenants_of.setdefault(queue, []).append(queue)
    return {q: sorted(ts) for q, ts in sorted(tenants_of.items()) if len(ts) > 1}


class PlanRunner:
    """Feeds raw records to a :class:`PlanAssembler`; prints or applies each whole plan.

    :meth:`feed` raises :class:`PlanRefused` or :class:`ApplyError` when a plan cannot
    be applied; the caller stops there.
    """

    def __init__(
        self,
        plans: PlanAssembler,
        *,
        queue_for: Mapping[str, str],
        flavor: str,
        known_queues: Collection[str] = (),
        apply: bool = False,
        kubectl: Sequence[str] = ("kubectl",),
        out: TextIO | None = None,
        limit: int | None = None,
    ) -> None:
        self.plans, self.queue_for, self.known_queues = plans, queue_for, known_queues
        self.flavor, self.apply, self.kubectl = flavor, apply, kubectl
        self.out = out if out is not None else sys.stdout
        self.limit = limit  # run at most this many plans (--max-plans)
        self.done = 0
        self.held_back = 0  # plans released past the limit, not run

    @property
    def full(self) -> bool:
        """``True`` once :attr:`limit` plans have run."""
        return self.limit is not None and self.done >= self.limit

    def feed(self, raw: bytes | None, where: str | None = None) -> None:
        """Take one record: a JSON line of stdin, or a Kafka record ``where`` (its
        ``topic[partition]@offset``). One that is no valid event is skipped, saying why."""
        try:
            event = decode_scaling_event(raw)
        except SchemaError as exc:
            if where is not None:
                log.warning("skipping %s, not a valid event: %s", where, exc)
            else:
                hint = (
                    ""
                    if (raw or b"").lstrip()[:1] == b"{"
                    else " (no JSON object: is the input `dprobe events --json`?)"
                )
                log.warning("skipping an invalid event: %s%s", exc, hint)
            return
        self.run(self.plans.add(event))

    def run(self, released: list[ScalingEvent]) -> None:
        """Apply (or print) the plans ``released`` holds, one after another in plan order."""
        plans: dict[str, list[ScalingEvent]] = {}
        for e in released:
            plans.setdefault(e.plan_id, []).append(e)
        for plan_id, events in plans.items():
            if self.full:
                self.held_back += 1
                continue
            self._run_plan(plan_id, events)

    def _run_plan(self, plan_id: str, events: list[ScalingEvent]) -> None:
        moves = plan_moves(events, queue_for=self.queue_for, known_queues=self.known_queues)
        summary = ", ".join(f"{m.event.tenant} {m.event.delta_gpus:+g}" for m in moves)
        print(f"# plan {plan_id}: {summary}", file=self.out, flush=True)
        if self.apply:
            for m in moves:
                changed = set_quota(
                    m.queue, m.gpus, flavor=self.flavor, kubectl=self.kubectl,
                    resource=m.event.resource,
                )  # fmt: skip
                state = "set to" if changed else "already"
                print(f"# clusterqueue {m.queue}: {state} {m.gpus}", file=self.out, flush=True)
        else:
            lines = [set_quota_command(m, flavor=self.flavor, kubectl=self.kubectl) for m in moves]
            print("set -e", *lines, sep="\n", file=self.out, flush=True)
        self.done += 1


async def consume(args: argparse.Namespace, runner: PlanRunner) -> None:
    """Read the topic. With ``--apply``, commit once every plan read is applied (none is
    half-received); without it, never commit."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    try:  # a port beyond 65535 is an OverflowError
        consumer = AIOKafkaConsumer(
            bootstrap_servers=args.bootstrap,
            group_id=args.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if args.from_beginning else "latest",
            isolation_level="read_committed",  # what the worker's transactions committed
        )
    except (ValueError, OverflowError, KafkaError) as exc:
        raise SetupError(f"--bootstrap {args.bootstrap}: {exc}") from None
    client_log = logging.getLogger("aiokafka")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)  # its own "Unable connect" line: ours says it once
    try:
        await consumer.start()
    except (ValueError, OverflowError) as exc:  # e.g. a port that is not a number
        await consumer.stop()
        raise SetupError(f"--bootstrap {args.bootstrap}: not HOST:PORT[,...] ({exc})") from None
    except (KafkaError, OSError) as exc:
        await consumer.stop()
        raise SetupError(f"cannot reach Kafka at {args.bootstrap}: {exc}") from None
    finally:
        client_log.setLevel(level)
    try:
        # asked before subscribing: a broker that creates topics on demand would make a
        # misspelt one, and the consumer would wait on it for ever
        try:
            topics = await consumer.topics()
        except KafkaError as exc:
            raise SetupError(
                f"cannot list the topics of Kafka at {args.bootstrap}: {exc}"
            ) from None
        if args.topic not in topics:
            raise SetupError(
                f"topic {args.topic} does not exist: check --topic (the workers' topic "
                "prefix), or start a worker first (it creates the topic)"
            )
        consumer.subscribe([args.topic])
        try:
            await _read(consumer, args, runner)
        except KafkaError as exc:  # e.g. a partition another member of the group took
            raise ReadError(
                f"{args.topic} as group {args.group}: {' '.join(str(exc).split())}; the "
                "plans read since the last commit are not committed, so the consumer that "
                "reads them next applies them again (targets are absolute)"
            ) from None
    finally:
        await consumer.stop()


async def _read(consumer: Any, args: argparse.Namespace, runner: PlanRunner) -> None:
    """Feed the records of the subscribed topic to ``runner`` until it is full; with
    ``--apply``, commit once every plan read is applied."""
    fed: dict[Any, int] = {}  # partition -> the offset after the last record fed, uncommitted
    assigned: set[Any] = set()  # partitions the group has given it so far

    committed: dict[Any, int] = {}  # partition -> the offset committed last

    async def commit_applied(read_all: bool = False) -> None:
        # every plan read is applied: none half-received, none released past the limit
        nonlocal fed
        if not runner.apply or runner.plans.pending_plans or runner.held_back:
            return
        offsets = dict(fed)
        if read_all:  # past the transaction markers after the last records: no lag of 1
            for tp in consumer.assignment():
                offsets[tp] = max(offsets.get(tp, 0), await consumer.position(tp))
        offsets = {tp: o for tp, o in offsets.items() if o > committed.get(tp, -1)}
        if offsets:
            await consumer.commit(offsets)
            committed.update(offsets)
        fed = {}

    while not runner.full:
        batch = await consumer.getmany(timeout_ms=1000)
        new = consumer.assignment() - assigned
        if new:
            assigned |= new
            numbers = ", ".join(str(tp.partition) for tp in sorted(new))
            log.info("reading %s (partition %s) as group %s", args.topic, numbers, args.group)
            if runner.apply:
                await commit_start(consumer, batch, new)
        for tp, records in batch.items():
            for record in records:
                if runner.full:  # --max-plans: what comes after is left for next time
                    break
                where = f"{tp.topic}[{tp.partition}]@{record.offset}"
                # kubectl runs in a thread, so the group's heartbeats go on: a plan
                # slower to apply than the session timeout keeps its partitions
                # (raises when a plan fails: that plan not committed)
                done = runner.done
                await asyncio.to_thread(runner.feed, record.value, where)
                fed[tp] = record.offset + 1
                if runner.done > done:  # a plan applied: a failure later in the batch
                    await commit_applied()  # does not make the next run apply it again
        # plans an expired older one held back
        await asyncio.to_thread(runner.run, runner.plans.release_ready())
        await commit_applied(read_all=not runner.full)


class SetupError(Exception):
    """Kafka cannot be read as asked (unreachable, no such topic): exit 2, one line."""


class ReadError(Exception):
    """Reading or committing failed once it had begun: exit 1, one line."""


def _set_quotas(args: argparse.Namespace, kubectl: list[str]) -> int:
    """``--set-quota`` mode: each QUEUE=GPUS in order; stop at the first failure."""
    for item in args.set_quota:
        queue, sep, gpus = item.partition("=")
        error = None
        try:
            target = whole_gpus(float(gpus), args.resource) if sep and queue else None
            if target is None:
                error = f"expected CLUSTERQUEUE=GPUS, got {item!r}"
            else:
                changed = set_quota(
                    queue, target, flavor=args.flavor, kubectl=kubectl, resource=args.resource
                )
        except (ValueError, ApplyError) as exc:
            error = str(exc)
        if error is not None:
            log.error("clusterqueue %s not changed: %s", queue, error)
            return 1
        log.info("clusterqueue %s: %s %s", queue, "set to" if changed else "already", target)
    return 0


EPILOG = """\
examples:
  python examples/kueue_quota_consumer.py --bootstrap 127.0.0.1:9092 --apply \\
      --queue-map vc-a=team-a,vc-b=team-b --flavor a100
  dprobe events --json --from-beginning --timeout 5 | \\
      python examples/kueue_quota_consumer.py --stdin --known-queues vc-a,vc-b --flavor a100 | sh

exit status:
  0: done (--max-plans reached, the input ended, or Ctrl-C)
  1: a plan refused or a change that failed: nothing after it applied or committed
  2: bad arguments, a topic that does not exist, or a Kafka it cannot reach
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument(
        "--bootstrap", default="127.0.0.1:9092", help="Kafka HOST:PORT[,...] (default %(default)s)"
    )  # fmt: skip
    p.add_argument(
        "--topic", default="dprobe.scaling-events", help="events topic (default %(default)s)"
    )  # fmt: skip
    p.add_argument(
        "--group", default="kueue-quota-consumer",
        help="consumer group: with --apply, commits what it applied (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--from-beginning", action="store_true",
        help="a group's first run starts at the oldest event (default: the newest)",
    )  # fmt: skip
    p.add_argument("--queue-map", default="", help="TENANT=CLUSTERQUEUE,...")
    p.add_argument(
        "--known-queues", default="", help="CLUSTERQUEUE,... named like their tenant"
    )  # fmt: skip
    p.add_argument(
        "--flavor", default=DEFAULT_FLAVOR, help="ResourceFlavor of the GPUs (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--resource", default=GPU, help="the resource --set-quota sets (default %(default)s)"
    )  # fmt: skip
    p.add_argument(
        "--kubectl", default="kubectl",
        help="kubectl command line, e.g. 'kubectl --context prod' (default %(default)s)",
    )  # fmt: skip
    p.add_argument("--apply", action="store_true", help="apply plans (Kafka: and commit them)")
    p.add_argument(
        "--plan-timeout", type=float, default=300.0, metavar="S",
        help="drop a plan still incomplete after S seconds, unapplied (default %(default)g)",
    )  # fmt: skip
    p.add_argument("--max-plans", type=int, metavar="N", help="stop after N plans")
    p.add_argument("--stdin", action="store_true", help="read JSON lines from stdin, not Kafka")
    p.add_argument(
        "--set-quota", action="append", metavar="CLUSTERQUEUE=GPUS", help="set one quota, exit"
    )  # fmt: skip
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)  # not its progress lines
    try:
        kubectl = shlex.split(args.kubectl)
    except ValueError as exc:  # e.g. an unclosed quote
        p.error(f"--kubectl {args.kubectl!r}: {exc}")
    if not kubectl:
        p.error("--kubectl names no command")
    if args.set_quota:
        return _set_quotas(args, kubectl)
    try:
        queue_for = parse_queue_map(args.queue_map)
    except ValueError as exc:
        p.error(str(exc))
    known = {q.strip() for q in args.known_queues.split(",") if q.strip()}
    if not queue_for and not known:
        p.error("give --queue-map and/or --known-queues: which ClusterQueue is whose")
    shared = shared_queues(queue_for, known)
    if shared:  # one plan after another would set the queue to each tenant's quota in turn
        p.error(
            "; ".join(f"tenants {', '.join(ts)} share ClusterQueue {q}" for q, ts in shared.items())
            + " (each tenant needs a ClusterQueue of its own: check --queue-map and "
            "--known-queues)"
        )
    if not args.group.strip():
        p.error("--group must name a consumer group")
    if args.max_plans is not None and args.max_plans < 1:
        p.error(f"--max-plans must be >= 1, got {args.max_plans}")
    if not (args.plan_timeout > 0 and math.isfinite(args.plan_timeout)):  # 0: all expire
        p.error(f"--plan-timeout must be a positive number of seconds, got {args.plan_timeout:g}")
    runner = PlanRunner(
        PlanAssembler(max_age_s=args.plan_timeout), queue_for=queue_for, flavor=args.flavor,
        known_queues=known, apply=args.apply, kubectl=kubectl, limit=args.max_plans,
    )  # fmt: skip
    stopped: Exception | None = None
    setup_failed: SetupError | None = None
    read_failed: ReadError | None = None
    try:
        if args.stdin:
            for line in sys.stdin.buffer:
                if runner.full:
                    break
                if line.strip():
                    runner.feed(line.strip())
            else:  # the input ended: a plan still incomplete never will be
                runner.run(runner.plans.end_of_input())
        else:
            if not args.apply:
                log.info("printing plans only, committing nothing (--apply to apply them)")
            asyncio.run(consume(args, runner))
    except SetupError as exc:
        setup_failed = exc
    except ReadError as exc:
        read_failed = exc
    except (PlanRefused, ApplyError) as exc:
        stopped = exc
    except KeyboardInterrupt:
        log.info("interrupted")
    except BrokenPipeError:  # stdout's reader has gone (`| head`): end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    if setup_failed is not None:
        log.error("%s", setup_failed)  # one line: no traceback for a setting to fix
        return 2
    if read_failed is not None:
        log.error("%s", read_failed)
        return 1
    if stopped is not None:
        log.error("%s; stopped, nothing after it applied", stopped)
        if not args.apply:  # the printed script stops there too
            print(f"# stopped: {stopped}\nexit 1", flush=True)
    plans = runner.plans
    log.info(
        "%s %s, %s dropped, %s incomplete or expired",
        _count(runner.done, "plan"), "applied" if args.apply else "printed",
        _count(plans.duplicates, "duplicate"), _count(plans.expired + plans.pending_plans, "plan"),
    )  # fmt: skip
    return 0 if stopped is None else 1


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``_count(1, "plan")`` is ``'1 plan'``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


if __name__ == "__main__":
    sys.exit(main())
