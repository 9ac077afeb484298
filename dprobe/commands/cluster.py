"""Tell the planner what the fleet is (topic dprobe.cluster), or show what it was told.

The planner plans from the capacity and quotas the scheduler reports, not from its own
guess. A scheduler adapter publishes a ClusterReport whenever they change (and now and
then); this command publishes one from a shell or a cron job, and shows the last report
of each source. Quotas are GPUs per tenant (Kueue: a ClusterQueue's nominalQuota; Volcano:
a queue's deserved); --complete says tenants not listed hold none. --quotas-csv reads a
file with the header tenant,quota_gpus; a bad line (a tenant listed twice, a row with more
fields than the header included, a header that names a column twice) exits 2 naming its
line number; so does a tenant given twice by --quota (a --quota replaces the file's quota
of its tenant). Quotas may sum above
the capacity (an overcommitted scheduler's may): such a report is published with a
warning, since the planner then lends only quota that tenants leave idle (and a digit too
many looks the same); otherwise it lends what reported quotas leave of the capacity.

  dprobe cluster publish --capacity 256 --quota vc-a=64 --quota vc-b=192 --complete
  dprobe cluster publish --quotas-csv quotas.csv --source kueue
  dprobe cluster show [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dprobe.count_text import count_of
from dprobe.errors import UsageError
from dprobe.models.planner import floor_to_node

if TYPE_CHECKING:
    from dprobe.config import KafkaSettings
    from dprobe.schema import ClusterReport

MAX_CSV_BYTES = 64 << 20
SHOW_READ_S = 60.0  # cluster show: the longest it reads the topic
MAX_NODE_WARNINGS = 10  # quotas named in warnings of GPUs that are not whole nodes


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["publish", "show"], help="publish a report, or show them")
    p.add_argument("--capacity", type=float, metavar="GPUS", help="GPUs the tenants share")
    p.add_argument(
        "--quota",
        action="append",
        default=[],
        metavar="TENANT=GPUS",
        help="a tenant's quota now (repeatable)",
    )
    p.add_argument("--quotas-csv", type=Path, metavar="FILE", help="CSV: tenant,quota_gpus")
    p.add_argument(
        "--complete", action="store_true", help="tenants not listed hold no quota (a full list)"
    )
    p.add_argument("--source", help="who reports (the record key; default cli)")
    p.add_argument("--json", action="store_true", help="print the report(s) as JSON on stdout")


_PUBLISH_ONLY = (
    ("--capacity", "capacity"),
    ("--quota", "quota"),
    ("--quotas-csv", "quotas_csv"),
    ("--complete", "complete"),
    ("--source", "source"),
)


def _given(value: object) -> bool:
    """A flag's value other than its default (``None``, ``[]``, ``False``).

    >>> [_given(v) for v in (None, [], False, 0.0, ["a=8"], True)]
    [False, False, False, True, True, True]
    """
    return not (value is None or value is False or value == [])


def run(args: argparse.Namespace) -> int:
    from dprobe.commands._common import settings
    from dprobe.config import WorkerSettings

    worker = settings(WorkerSettings, args)  # the topic is created as the worker would
    kafka = worker.kafka
    if args.action == "show":
        given = [f for f, name in _PUBLISH_ONLY if _given(getattr(args, name))]
        if given:
            raise UsageError(f"{', '.join(given)}: only for cluster publish (show reads reports)")
        reports, invalid = asyncio.run(_latest(kafka))
        if args.json:
            print(json.dumps([json.loads(_encoded(r)) for r in reports]))
        for r in reports:
            print(_describe(r), file=sys.stderr if args.json else sys.stdout)
        if not reports:
            skipped = f" ({count_of(invalid, 'invalid record')} skipped)" if invalid else ""
            print(f"no valid report on {kafka.topic('cluster')} yet{skipped}", file=sys.stderr)
        return 0
    report = report_from(args)
    if report.complete and not report.quotas:
        print(
            "warning: --complete without a quota: this report gives every tenant a quota of 0",
            file=sys.stderr,
        )
    for line in [*_partial_nodes(report, worker.node_gpus), *_overcommit(report, worker.node_gpus)]:
        print(f"warning: {line}", file=sys.stderr)
    asyncio.run(_publish(kafka, report, worker.replication_factor))
    if args.json:
        print(_encoded(report))
    print(f"published to {kafka.topic('cluster')}: {_describe(report)}", file=sys.stderr)
    return 0


def report_from(args: argparse.Namespace, now: float | None = None) -> ClusterReport:
    """The report the arguments describe; :class:`UsageError` when they describe nothing
    or a value is not a number of GPUs.

    >>> ns = argparse.Namespace(capacity=64.0, quota=["a=16"], quotas_csv=None,
    ...     complete=False, source="cli")
    >>> report_from(ns, now=5.0).quotas
    {'a': 16.0}
    """
    from dprobe.schema import (
        MAX_REPORTED_TENANTS,
        ClusterReport,
        SchemaError,
        decode_cluster_report,
        encode,
    )

    source = "cli" if args.source is None else args.source
    _check_name(source, f"--source {_shown(source)}", "a source")
    quotas: dict[str, float] = {}
    if args.quotas_csv is not None:
        quotas.update(_read_csv(args.quotas_csv))
    given: dict[str, str] = {}  # tenant -> the --quota that named it (the CSV's may be replaced)
    for item in args.quota:
        tenant, sep, value = item.rpartition("=")
        what = f"--quota {_shown(item)}"
        if not sep or not tenant:
            raise UsageError(f"{what}: expected TENANT=GPUS")
        _check_name(tenant, what, "a tenant")
        if tenant in given:
            raise UsageError(
                f"{what}: tenant {_shown(tenant)} is given twice (also --quota "
                f"{_shown(given[tenant])})"
            )
        given[tenant] = item
        quotas[tenant] = _gpus(value, what)
    if len(quotas) > MAX_REPORTED_TENANTS:
        raise UsageError(
            f"{len(quotas)} tenants with a quota, more than a report holds ({MAX_REPORTED_TENANTS})"
        )
    if args.capacity is not None:
        _gpus(str(args.capacity), f"--capacity {args.capacity:g}")
    if args.capacity is None and not quotas and not args.complete:
        if args.quotas_csv is not None:  # given, but it holds only its header (or nothing)
            raise UsageError(
                f"nothing to publish: {args.quotas_csv} lists no tenant, and no --capacity "
                f"or --quota is given"
            )
        raise UsageError("nothing to publish: give --capacity, --quota or --quotas-csv")
    report = ClusterReport(
        ts=time.time() if now is None else now,
        source=source,
        capacity_gpus=args.capacity,
        quotas=quotas,
        complete=args.complete,
    )
    try:  # the same rules the worker applies (names, bounds)
        return decode_cluster_report(encode(report))
    except SchemaError as exc:
        raise UsageError(f"not a valid report: {exc}") from None


def _partial_nodes(report: ClusterReport, node: int) -> list[str]:
    """What the planner will not read as reported: it counts GPUs in whole nodes of
    ``node`` GPUs (``worker.node_gpus``) and rounds the rest down.

    >>> r = argparse.Namespace(capacity_gpus=36.0, quotas={"a": 16.0, "b": 4.0})
    >>> _partial_nodes(r, 8)  # doctest: +NORMALIZE_WHITESPACE
    ['--capacity 36 is not whole nodes of 8 GPUs (worker.node_gpus): the planner reads 32',
     'b=4 is not whole nodes of 8 GPUs (worker.node_gpus): the planner reads 0']
    """
    out = []
    given = [("--capacity ", report.capacity_gpus)] if report.capacity_gpus is not None else []
    given += [(f"{t}=", q) for t, q in sorted(report.quotas.items())]
    for what, gpus in given:
        whole = floor_to_node(gpus, node)  # as the planner reads it
        if gpus - whole > 1e-9:
            out.append(
                f"{what}{gpus:g} is not whole nodes of {node} GPUs (worker.node_gpus): "
                f"the planner reads {whole:g}"
            )
    if len(out) > MAX_NODE_WARNINGS:
        out[MAX_NODE_WARNINGS:] = [f"{len(out) - MAX_NODE_WARNINGS} more quotas like these"]
    return out


def _overcommit(report: ClusterReport, node: int) -> list[str]:
    """The warning for quotas that sum above the report's capacity, as the planner reads
    both (whole nodes of ``node`` GPUs): valid (an overcommitting scheduler's quotas do),
    but a typo looks the same.

    >>> r = argparse.Namespace(capacity_gpus=64.0, quotas={"a": 640.0})
    >>> _overcommit(r, 8)[0][:57]
    'the quotas sum to 640 GPUs, more than the capacity 64 (as'
    """
    if report.capacity_gpus is None:  # the capacity in force is not known here
        return []
    capacity = floor_to_node(report.capacity_gpus, node)
    total = sum(floor_to_node(q, node) for q in report.quotas.values())
    if total <= capacity:
        return []
    return [
        f"the quotas sum to {total:g} GPUs, more than the capacity {capacity:g} (as the "
        f"planner reads them, in whole nodes of {node} GPUs): the planner lends only quota "
        f"that tenants leave idle and raises no tenant above {capacity:g} GPUs (right for "
        "an overcommitting scheduler; otherwise check the figures)"
    ]


def _shown(text: str) -> str:
    """``text`` for an error line, cut short (a name may be thousands of characters).

    >>> _shown("vc-a"), _shown("x" * 3000)
    ("'vc-a'", "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... (3000 characters)")
    """
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text)} characters)"


def _check_name(name: str, what: str, kind: str) -> None:
    """:class:`UsageError` unless ``name`` is a name a report may hold (the schema's
    ``Id``: 1 to 256 characters of valid UTF-8; spaces included, control characters not)."""
    from dprobe.text_input import has_control_character
    from dprobe.traces.row_input import MAX_ID_CHARS

    if not 1 <= len(name) <= MAX_ID_CHARS:
        raise UsageError(
            f"{what}: {kind} name must be 1 to {MAX_ID_CHARS} characters, not {len(name)}"
        )
    try:
        name.encode()
    except UnicodeEncodeError:
        raise UsageError(f"{what}: {kind} name must be valid UTF-8") from None
    if has_control_character(name):
        raise UsageError(f"{what}: {kind} name {_shown(name)} holds a control character")


def _gpus(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{what}: not a number of GPUs") from None
    if not (math.isfinite(value) and 0 <= value <= 1e7):
        raise UsageError(f"{what}: GPUs must be within [0, 1e7]")
    return value


def _read_csv(path: Path) -> dict[str, float]:
    from dprobe.text_input import read_text
    from dprobe.traces.row_input import (
        MAX_ID_CHARS,
        csv_rows,
        field_count,
        twice_named,
        unfit_name,
    )

    text = read_text(path, max_bytes=MAX_CSV_BYTES, error=UsageError, what="quotas file ")
    rows = csv_rows(
        io.StringIO(text, newline=""),
        name=str(path),
        error=lambda message, line: UsageError(f"{path}: line {line}: {message}"),
    )
    _, header = next(rows, (1, []))
    cols = {name.strip(): i for i, name in enumerate(header)}
    if not {"tenant", "quota_gpus"} <= set(cols):
        raise UsageError(f"{path}: line 1: expected the header tenant,quota_gpus")
    if twice := twice_named([name.strip() for name in header], ["tenant", "quota_gpus"]):
        raise UsageError(f"{path}: line 1: {twice}")
    out: dict[str, float] = {}
    for line, row in rows:
        if not row:
            continue
        if len(row) != len(header):
            raise UsageError(f"{path}: line {line}: {field_count(row, header)}")
        tenant = row[cols["tenant"]].strip()
        if not tenant:
            raise UsageError(f"{path}: line {line}: empty tenant")
        if problem := unfit_name(tenant, "tenant", MAX_ID_CHARS):
            raise UsageError(f"{path}: line {line}: {problem}")
        if tenant in out:
            raise UsageError(f"{path}: line {line}: tenant {tenant!r} is listed twice")
        out[tenant] = _gpus(row[cols["quota_gpus"]].strip(), f"{path}: line {line}")
    return out


def _encoded(report: ClusterReport) -> str:
    from dprobe.schema import encode

    return encode(report).decode()


def _describe(r: ClusterReport) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.ts))
    capacity = "unchanged" if r.capacity_gpus is None else f"{r.capacity_gpus:g} GPUs"
    quotas = ", ".join(f"{t}={q:g}" for t, q in sorted(r.quotas.items())) or "none"
    complete = " (complete)" if r.complete else ""
    return f"{when} UTC source {r.source}: capacity {capacity}; quotas {quotas}{complete}"


async def _publish(kafka: KafkaSettings, report: ClusterReport, replication: int) -> None:
    """Send ``report`` keyed by its source, creating the topic first if it is missing (one
    partition, compacted: the latest report of every source is kept)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    from dprobe.kafka_auth import start_client
    from dprobe.schema import encode

    topic = kafka.topic("cluster")
    if await _partitions(kafka, topic, check=True) is None:
        await _create(kafka, topic, replication)
    producer = AIOKafkaProducer(**kafka.client_kwargs(), acks="all", enable_idempotence=True)
    await start_client(producer.start, producer.stop, kafka, KafkaConnectionError)
    try:
        await producer.send_and_wait(topic, value=encode(report), key=report.source.encode())
    finally:
        await producer.stop()


async def _partitions(kafka: KafkaSettings, topic: str, *, check: bool = False) -> list[int] | None:
    """Partition ids of ``topic`` (``None``: missing), without auto-creating it; with
    ``check``, a warning if it is not compacted as dprobe creates it."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaConnectionError

    from dprobe import topic_configs
    from dprobe.kafka_auth import start_client

    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    await start_client(admin.start, admin.close, kafka, KafkaConnectionError)
    try:
        for d in await admin.describe_topics():  # all topics: naming one could create it
            if d["topic"] == topic and d["error_code"] == 0:
                if check:
                    await topic_configs.warn_if_unlike(admin, {topic: "cluster"}, kafka.bootstrap)
                return sorted(p["partition"] for p in d["partitions"])
        return None
    finally:
        await admin.close()


async def _create(kafka: KafkaSettings, topic: str, replication: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaConnectionError

    from dprobe import topic_configs
    from dprobe.kafka_auth import start_client
    from dprobe.topic_create import create_topics

    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    await start_client(admin.start, admin.close, kafka, KafkaConnectionError)
    try:
        new = NewTopic(topic, 1, replication, topic_configs=topic_configs.COMPACTED)
        await create_topics(admin, [new])  # one that exists: another publisher won the race
    finally:
        await admin.close()


async def _latest(kafka: KafkaSettings) -> tuple[list[ClusterReport], int]:
    """The last valid report of each source on the cluster topic (read to its end), and
    how many records were invalid (each named on stderr with its reason, as ``dprobe
    events`` does; the worker dead-letters them).

    Last in the order the worker reads them (offsets), not by ``ts``: the worker applies
    reports as they arrive (the newest word wins) and compaction keeps a source's last
    record, so a report published after another with an older ``ts`` (a publisher whose
    clock went back) is the one in force. A tombstone (a record with a key and no value)
    retires the reports of the source it keys, as compaction will. Only between
    partitions, which have no common order (the topic this command and the worker create
    has one), the later ``ts`` wins."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaConnectionError

    from dprobe.kafka_auth import start_client
    from dprobe.schema import SchemaError, decode_cluster_report

    topic = kafka.topic("cluster")
    partitions = await _partitions(kafka, topic)
    if not partitions:
        return [], 0
    consumer = AIOKafkaConsumer(**kafka.client_kwargs(), group_id=None, enable_auto_commit=False)
    await start_client(consumer.start, consumer.stop, kafka, KafkaConnectionError)
    latest: dict[str, tuple[int, ClusterReport]] = {}  # source -> (partition, report)
    invalid = 0
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        left = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + SHOW_READ_S
        while left and time.monotonic() < deadline:
            batch = await consumer.getmany(*left, timeout_ms=1000)
            for records in batch.values():
                for rec in records:
                    if rec.value is None and rec.key is not None:
                        # a tombstone retires the reports of its key, which is the source
                        # of the reports published with it; compaction removes them later
                        latest.pop(rec.key.decode(errors="replace"), None)
                        continue
                    try:
                        r = decode_cluster_report(rec.value)
                    except SchemaError as exc:
                        invalid += 1
                        print(f"dprobe cluster: skipping {rec.topic}[{rec.partition}]@"
                              f"{rec.offset}: {exc}", file=sys.stderr)  # fmt: skip
                        continue
                    before = latest.get(r.source)
                    if before is None or before[0] == rec.partition or r.ts >= before[1].ts:
                        latest[r.source] = (rec.partition, r)
            left = {tp for tp in left if await consumer.position(tp) < ends[tp]}
        for tp in sorted(left, key=lambda tp: tp.partition):
            print(f"dprobe cluster: warning: stopped reading {topic}[{tp.partition}] after "
                  f"{SHOW_READ_S:g} s at offset {await consumer.position(tp)} of "
                  f"{ends[tp]}: later reports are not shown", file=sys.stderr)  # fmt: skip
    finally:
        await consumer.stop()
    return [latest[s][1] for s in sorted(latest)], invalid
