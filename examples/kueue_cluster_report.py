"""Tell dprobe what Kueue's ClusterQueues hold: their GPU nominalQuota as one cluster report.

The planner plans from the quotas the scheduler reports on ``dprobe.cluster`` (see
docs/worker.md, "The fleet as it is"). This adapter reads ClusterQueues as ``kubectl get
clusterqueues -o json`` prints them and prints the ``dprobe cluster publish`` command that
reports them: each queue's ``nominalQuota`` of ``nvidia.com/gpu`` (summed over its
flavors, or only ``--flavor``), as the quota of its tenant (``--queue-map
vc-a=team-a,...``, the same map as ``kueue_quota_consumer.py``; by default a queue's
tenant has its name), and their sum as the capacity the tenants share (the cohort's pool;
``--cohort`` keeps only its queues: ``spec.cohortName`` in Kueue's v1beta2 API,
``spec.cohort`` in v1beta1). The list is complete: a tenant with no queue holds nothing.
So a queue whose quota cannot be read (not a whole number of GPUs) is not left out: the
adapter names it and exits with status 1, printing nothing. Nothing here talks to a
cluster or to Kafka: review the line, then pipe it to ``sh`` (e.g. from a CronJob every
few minutes, and after every quota change).

Usage:
    kubectl get clusterqueues -o json | \\
        python examples/kueue_cluster_report.py --cohort gpu-pool --flavor a100 | sh

Example:
    >>> queues = {"items": [
    ...     {"metadata": {"name": "team-a"}, "spec": {"cohort": "gpu", "resourceGroups": [
    ...         {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "a100",
    ...          "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}]}]}}]}
    >>> print(publish_line(queue_quotas(queues, tenant_of={"team-a": "vc-a"})))
    dprobe cluster publish --source kueue --complete --capacity 16 --quota vc-a=16
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shlex
import sys
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

log = logging.getLogger("kueue_cluster_report")

GPU = "nvidia.com/gpu"


# Kubernetes quantity grammar: <signedNumber><suffix>, the suffix binary SI (Ki...),
# decimal SI (m, "", k, M...) or a decimal exponent (e3, E-2).
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


def gpus_of(value: Any) -> int:
    """A Kubernetes quantity of GPUs (an extended resource: whole numbers) as an int.

    >>> gpus_of(16), gpus_of("8"), gpus_of("1k"), gpus_of("2000m"), gpus_of("1e2")
    (16, 8, 1000, 2, 100)
    """
    amount = quantity(value)
    if amount < 0 or amount.denominator != 1:
        raise ValueError(f"not a whole number of GPUs: {value!r}")
    return int(amount)


def cohort_of(cluster_queue: Mapping[str, Any]) -> str | None:
    """The cohort of a ClusterQueue: ``spec.cohortName`` (v1beta2) or ``spec.cohort``."""
    spec = cluster_queue.get("spec", {})
    return spec.get("cohortName") or spec.get("cohort") or None


def queue_quotas(
    queues: Mapping[str, Any],
    *,
    tenant_of: Mapping[str, str],
    cohort: str | None = None,
    flavor: str | None = None,
    resource: str = GPU,
    skipped: list[str] | None = None,
) -> dict[str, int]:
    """Tenant -> GPU nominalQuota of its ClusterQueue(s), from a ClusterQueueList.

    Queues outside ``cohort`` (when given) are left out; a queue whose quota is not a whole
    number is skipped with a warning and its name appended to ``skipped`` (when given).
    Two queues of one tenant add up.
    """
    out: dict[str, int] = {}
    for cq in queues.get("items", ()):
        name = cq.get("metadata", {}).get("name", "")
        spec = cq.get("spec", {})
        if not name or (cohort is not None and cohort_of(cq) != cohort):
            continue
        total = 0
        try:
            for group in spec.get("resourceGroups", ()):
                for fl in group.get("flavors", ()):
                    if flavor is not None and fl.get("name") != flavor:
                        continue
                    for res in fl.get("resources", ()):
                        if res.get("name") == resource:
                            total += gpus_of(res.get("nominalQuota", 0))
        except ValueError as exc:
            log.warning("ClusterQueue %s skipped: %s", name, exc)
            if skipped is not None:
                skipped.append(name)
            continue
        tenant = tenant_of.get(name, name)
        out[tenant] = out.get(tenant, 0) + total
    return out


def gpu_flavors(queues: Mapping[str, Any], *, cohort: str | None = None) -> set[str]:
    """The ResourceFlavors that give GPU quota in the ClusterQueues (of ``cohort``).

    >>> q = {"items": [{"metadata": {"name": "a"}, "spec": {"resourceGroups": [{"flavors": [
    ...     {"name": "a100", "resources": [{"name": GPU, "nominalQuota": 8}]},
    ...     {"name": "cpu", "resources": [{"name": "cpu", "nominalQuota": 64}]}]}]}}]}
    >>> gpu_flavors(q)
    {'a100'}
    """
    return {
        fl.get("name", "")
        for cq in queues.get("items", ())
        if cohort is None or cohort_of(cq) == cohort
        for group in cq.get("spec", {}).get("resourceGroups", ())
        for fl in group.get("flavors", ())
        if any(res.get("name") == GPU for res in fl.get("resources", ()))
    }


def _type_name(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), "a number")


def shape_error(queues: Any) -> str | None:
    """What makes ``queues`` no ClusterQueueList (``None``: it is one), naming the path.

    >>> shape_error({"kind": "ClusterQueue", "metadata": {"name": "team-a"}})
    'one ClusterQueue (team-a), not the list: a complete report needs every queue'
    >>> shape_error({"items": [{"metadata": {"name": "a"}, "spec": None}]})
    'items[0].spec is not an object (null)'
    """
    if not isinstance(queues, dict):
        return f"a JSON {'array' if isinstance(queues, list) else _type_name(queues)}"
    if queues.get("kind") == "ClusterQueue":
        meta = queues.get("metadata")
        name = meta.get("name", "?") if isinstance(meta, dict) else "?"
        return f"one ClusterQueue ({name}), not the list: a complete report needs every queue"
    if not isinstance(queues.get("items"), list):
        return "no list of items"
    # (path, value, expected type) of each part queue_quotas and gpu_flavors read
    todo: list[tuple[str, Any, type]] = [
        (f"items[{i}]", cq, dict) for i, cq in enumerate(queues["items"])
    ]
    children = {"items": ("metadata", "spec"), "spec": ("resourceGroups",),
                "resourceGroups": ("flavors",), "flavors": ("resources",)}  # fmt: skip
    while todo:
        path, value, want = todo.pop(0)
        if not isinstance(value, want):
            what = "an object" if want is dict else "a list"
            return f"{path} is not {what} ({_type_name(value)})"
        if isinstance(value, list):
            todo += [(f"{path}[{i}]", v, dict) for i, v in enumerate(value)]
            continue
        field = path.rpartition(".")[2].partition("[")[0]
        for key in children.get(field, ()):
            if key in value:
                kind = dict if key in ("metadata", "spec") else list
                todo.append((f"{path}.{key}", value[key], kind))
    return None


def publish_line(quotas: Mapping[str, int], *, source: str = "kueue") -> str:
    """The ``dprobe cluster publish`` command reporting ``quotas`` (complete; capacity =
    their sum), shell-quoted."""
    args = ["dprobe", "cluster", "publish", "--source", source, "--complete"]
    args += ["--capacity", str(sum(quotas.values()))]
    for tenant, gpus in sorted(quotas.items()):
        args += ["--quota", f"{tenant}={gpus}"]
    return " ".join(shlex.quote(a) for a in args)


EPILOG = """\
example (review the line first; `set -o pipefail`: a refused report fails the pipeline):
  kubectl get clusterqueues -o json | \\
      python examples/kueue_cluster_report.py --cohort gpu-pool --flavor a100 | sh

exit status:
  0: the `dprobe cluster publish` line printed
  1: a ClusterQueue whose GPU quota is not a whole number (named): nothing printed
  2: bad arguments, input that is not the ClusterQueue list, or no GPU quota found
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--file", help="ClusterQueueList JSON (default: stdin)")
    p.add_argument("--queue-map", default="", help="TENANT=CLUSTERQUEUE,... (default: same name)")
    p.add_argument("--cohort", help="only the ClusterQueues of this cohort")
    p.add_argument("--flavor", help="only this ResourceFlavor (default: every flavor)")
    p.add_argument(
        "--source",
        default="kueue",
        help="the report's source, its record key (default %(default)s)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    tenant_of: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in args.queue_map.split(","))):
        tenant, sep, queue = item.partition("=")
        if not sep or not tenant.strip() or not queue.strip():
            p.error(f"--queue-map: expected TENANT=CLUSTERQUEUE, got {item!r}")
        other = tenant_of.setdefault(queue.strip(), tenant.strip())
        if other != tenant.strip():
            p.error(
                f"--queue-map: ClusterQueue {queue.strip()} is mapped to tenants "
                f"{', '.join(sorted({other, tenant.strip()}))}: its quota is one tenant's"
            )
    try:
        if args.file:
            with open(args.file, encoding="utf-8") as fh:
                queues = json.load(fh)
        else:
            queues = json.load(sys.stdin)
    except (OSError, ValueError) as exc:
        p.error(f"cannot read the ClusterQueue list: {exc}")
    wrong = shape_error(queues)
    if wrong is not None:
        p.error(
            f"not a ClusterQueue list as `kubectl get clusterqueues -o json` prints it: {wrong}"
        )
    listed = {cq.get("metadata", {}).get("name") for cq in queues["items"]}
    unknown = sorted(q for q in tenant_of if q not in listed)
    if unknown:  # misspelt: the report is complete, so its tenant would hold 0
        p.error(
            "--queue-map: "
            + ", ".join(f"ClusterQueue {q} (tenant {tenant_of[q]})" for q in unknown)
            + " not in the list: check the map, or remove the tenants whose queue is gone"
        )
    skipped: list[str] = []
    quotas = queue_quotas(
        queues, tenant_of=tenant_of, cohort=args.cohort, flavor=args.flavor, skipped=skipped
    )
    if skipped:
        # The report is complete: a queue left out would tell the planner its tenant holds 0.
        log.error(
            "no report: the quota of ClusterQueue(s) %s could not be read; fix them and run again",
            ", ".join(skipped),
        )
        return 1
    if not quotas:
        p.error("no ClusterQueue with GPU quota found (check --cohort and --flavor)")
    flavors = gpu_flavors(queues, cohort=args.cohort)
    if args.flavor is not None and args.flavor not in flavors:
        # every tenant would be reported as holding 0: the planner would stop scaling
        p.error(
            f"no ClusterQueue gives GPU quota in flavor {args.flavor!r} (flavors with GPU "
            f"quota: {', '.join(sorted(flavors)) or 'none'}); check --flavor"
        )
    if sum(quotas.values()) == 0:
        p.error("every ClusterQueue found holds 0 GPUs: check --cohort and --flavor")
    print(publish_line(quotas, source=args.source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
