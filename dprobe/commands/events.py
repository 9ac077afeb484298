"""Tail the scaling events (topic dprobe.scaling-events), one line per event.

Duplicate events (same event_id, e.g. redelivered after a worker restart) are printed once;
the last 100,000 ids are remembered. Records that are not valid ScalingEvents are skipped
with a warning on stderr. Without --group the tail reads every partition and commits
nothing; with --group it joins that consumer group, commits where it starts (where the group
has no offset yet) and what it printed, and resumes there next time (--from-beginning
then only applies where the group has no offset, as with kafka-console-consumer).

Output: one readable line per event (time UTC, tenant, action, current -> target GPUs,
delta, forecast p50/p90 at its horizon, reason, plan id, sequence number and size, event
id, message). With --plans, a plan's events are printed together once all of them have
arrived, in plan order: a plan older than one already printed (a catch-up over a topic
with several partitions) shows only the tenants no newer plan has set, so the last line
of each tenant is its newest target. With --json, one JSON
object per line (JSON Lines), the event as produced: a tail has no end, so it cannot print
one JSON document; every line is one complete document for jq or a script. A summary goes
to stderr at the end. Stops on --max-events (with --plans, after the whole plan that
reaches it), after --timeout seconds without records (with --group, counted from when the
group gave this reader its partitions; a group that gives none within --timeout or 30 s,
the longer, is an error), or on Ctrl-C / SIGTERM (exit 0; while it still connects, 130 for
a Ctrl-C and 143 for SIGTERM, which ends it as it ends any process). With --group, where
it reads from is said once the group has given this reader its partitions; a join that
takes longer than 30 s is said on stderr.

Examples:
    dprobe events --from-beginning
    dprobe events --json | jq -c 'select(.tenant == "vc-a")'
    dprobe events --group quota-bot --max-events 10 --timeout 60
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from dprobe.consumer_start import commit_start
from dprobe.consumer_stop import stop_consumer
from dprobe.count_text import count_of
from dprobe.errors import DprobeError, UsageError
from dprobe.event_line import format_line
from dprobe.kafka_auth import connect_error, watching_auth
from dprobe.sinks.plan_order import PlanAssembler

if TYPE_CHECKING:
    from dprobe.config import KafkaSettings
    from dprobe.sinks.seen_ids import SeenIds

REMEMBERED_IDS = 100_000
POLL_MS = 500
JOIN_WAIT_S = 30.0  # with --group: said on stderr after this; with --timeout, the least wait
# (the module docstring, which --help prints, quotes it as "30 s")
LEAVE_WAIT_S = 2.0  # with --group: longest wait to leave a group not joined yet
HELD_PRUNE_AT = 100_000  # events held (plans not complete) before those of expired plans go
ASSIGN_WAIT_S = 30.0  # without --group: longest wait for the topic's partitions at the start


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per event and line (JSON Lines), nothing else on stdout",
    )
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the oldest retained event (default: only new events)",
    )
    p.add_argument(
        "--group",
        metavar="ID",
        help="consumer group: commit progress and resume from it next time",
    )
    p.add_argument(
        "--plans",
        action="store_true",
        help="print whole plans, in plan order, once all of their events have arrived",
    )
    p.add_argument(
        "--max-events",
        type=int,
        metavar="N",
        help="stop after printing N (distinct) events (with --plans: at the end of the plan "
        "that reaches N)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="stop when no record arrived for S seconds (with --group: once it holds its "
        "partitions; default: never)",
    )


def run(args: argparse.Namespace) -> int:
    from dprobe.commands._common import settings
    from dprobe.config import KafkaSettings

    if args.max_events is not None and args.max_events < 1:
        raise UsageError("--max-events must be >= 1")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError("--timeout must be > 0")
    if args.group is not None and not args.group.strip():
        raise UsageError("--group must name a consumer group")
    kafka = settings(KafkaSettings, args)
    return asyncio.run(_tail(kafka, args))


@dataclass
class _Tail:
    """Counts and progress of one tail: what to commit is what was handled."""

    json: bool
    max_events: int | None
    plans: PlanAssembler | None = None
    printed: int = 0
    duplicates: int = 0
    invalid: int = 0
    done: dict[Any, int] = field(default_factory=dict)  # TopicPartition -> next offset
    # event id -> (tp, offset, the record's value) of the events not printed yet
    held: dict[str, tuple[Any, int, bytes]] = field(default_factory=dict)
    # TopicPartition -> the first offset of an event that could not be printed (the reader
    # went away): nothing at or after it is committed, so the group reads it again
    unprinted: dict[Any, int] = field(default_factory=dict)

    def handle(self, tp: Any, offset: int, value: bytes | None, seen: SeenIds) -> bool:
        """Print one record unless invalid or a duplicate; ``False`` once the tail must stop."""
        from dprobe.schema import SchemaError, decode_scaling_event

        self.done[tp] = offset + 1
        try:
            ev = decode_scaling_event(value)
        except SchemaError as exc:
            self.invalid += 1
            print(f"dprobe events: skipping {tp.topic}[{tp.partition}]@{offset}: {exc}",
                  file=sys.stderr)  # fmt: skip
            return True
        if self.plans is None:
            if not seen.add(ev.event_id):
                self.duplicates += 1
                return True
            self.held[ev.event_id] = (tp, offset, value or b"")
            return self._print([ev])
        # whole plans: the assembler drops duplicates (and takes an expired plan's events
        # again when they are delivered again)
        self.held[ev.event_id] = (tp, offset, value or b"")
        before = self.plans.duplicates
        released = self.plans.add(ev)
        self.duplicates += self.plans.duplicates - before
        if len(self.held) > HELD_PRUNE_AT:  # events of plans that expired, never printed
            self._prune()
        return self._print(released)

    def handle_all(self, records: list[tuple[Any, Any]], seen: SeenIds) -> bool:
        """:meth:`handle` each ``(partition, record)``; ``False`` once the tail must stop."""
        return all(self.handle(tp, rec.offset, rec.value, seen) for tp, rec in records)

    def flush(self) -> bool:
        """Print the plans that can go out without a new event (an older one expired)."""
        return self._print(self.plans.release_ready()) if self.plans is not None else True

    def _print(self, events: list[Any]) -> bool:
        try:
            for i, out in enumerate(events):
                if i > 0 and out.plan_id != events[i - 1].plan_id and self._reached():
                    # --max-events reached at the end of a plan: the plans released with it
                    # are not printed, and a group reads them again next time
                    self._not_printed(events, i)
                    return False
                if not _write(sys.stdout, self._json(out) if self.json else format_line(out)):
                    # the reader went away (e.g. `| head`): the plans not printed whole are
                    # read again by the group next time, from their first event
                    self._not_printed(events, i)
                    return False
                self.printed += 1
            return not self._reached()
        finally:
            for e in events:  # released: no longer held
                self.held.pop(e.event_id, None)

    def _reached(self) -> bool:
        return self.max_events is not None and self.printed >= self.max_events

    def _not_printed(self, events: list[Any], i: int) -> None:
        """Keep the commit before the plans of ``events[i:]`` (their first event)."""
        cut = {e.plan_id for e in events[i:]}
        for e in events:
            where = self.held.get(e.event_id) if e.plan_id in cut else None
            if where is not None:
                tp, offset, _ = where
                self.unprinted[tp] = min(self.unprinted.get(tp, offset), offset)

    def _json(self, ev: Any) -> str:
        """The event as produced, on one line: every field of the record, those this
        version does not know included (a newer worker's)."""
        from dprobe.schema import to_builtins

        where = self.held.get(ev.event_id)
        if where is not None:
            with contextlib.suppress(ValueError):
                produced = json.loads(where[2])
                if isinstance(produced, dict):
                    return json.dumps(produced)
        return json.dumps(to_builtins(ev))

    def _prune(self) -> None:
        pending = self.plans.pending_event_ids if self.plans is not None else set()
        self.held = {i: where for i, where in self.held.items() if i in pending}

    def commit_offsets(self) -> dict[Any, int]:
        """The offsets to commit: what was handled, but no further than the first event of
        a plan still held, so a restart reads it again instead of losing the plan, nor
        than the first event that could not be printed."""
        out = dict(self.done)
        for tp, offset in self.unprinted.items():
            out[tp] = min(out.get(tp, offset), offset)
        if self.plans is None:
            return out
        self._prune()
        for tp, offset, _ in self.held.values():
            out[tp] = min(out.get(tp, offset), offset)
        return out


async def _past_markers(consumer: Any, tail: _Tail) -> bool:
    """Move what was handled on each partition read from to the consumer's position, past
    the commit markers of the worker's transactions that follow the last records read (a
    group committed at the marker shows a lag of 1 for ever); ``True`` when one moved."""
    moved = False
    for tp in consumer.assignment():
        position = await consumer.position(tp)
        if tp in tail.done and position > tail.done[tp]:
            tail.done[tp] = position
            moved = True
    return moved


async def _tail(kafka: KafkaSettings, args: argparse.Namespace) -> int:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import CommitFailedError, KafkaConnectionError, KafkaError

    from dprobe.sinks.seen_ids import SeenIds

    topic = kafka.topic("scaling-events")
    with watching_auth(quiet=True) as watch:
        consumer = AIOKafkaConsumer(  # subscribed below, once the topic is known to exist
            group_id=args.group,
            enable_auto_commit=False,  # commit exactly what was handled, below
            auto_offset_reset="earliest" if args.from_beginning else "latest",
            isolation_level="read_committed",  # whole plans only (sent in transactions)
            **kafka.client_kwargs(),
        )
        try:
            await consumer.start()
        except KafkaError as exc:
            await consumer.stop()
            if watch.failure is not None or isinstance(exc, KafkaConnectionError):
                raise connect_error(kafka, exc, watch) from None
            raise DprobeError(
                f"cannot read {topic} from Kafka at {kafka.bootstrap}: {exc}"
            ) from None
        except BaseException:  # Ctrl-C while connecting: close it, or asyncio says "Unclosed"
            await consumer.stop()
            raise
    try:
        joined = await _subscribe(consumer, topic, kafka, grouped=args.group is not None)
    except BaseException:
        await consumer.stop()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    plans = PlanAssembler() if args.plans else None
    seen = SeenIds(REMEMBERED_IDS)
    tail = _Tail(json=args.json, max_events=args.max_events, plans=plans)
    try:
        if joined is not None:
            await _join(joined, stop, topic, args)
        started: set[Any] = set()  # partitions whose start the group has committed
        if not stop.is_set():
            await _announce(consumer, topic, args)
            if args.group:
                started = set(consumer.assignment())
                await commit_start(consumer, {}, started)
        last_record = time.monotonic()  # with a group, the idle clock starts at the join
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=POLL_MS)
            if args.group and (new := consumer.assignment() - started):
                started |= new  # partitions a rebalance gave it since
                await commit_start(consumer, batch, new)
            if not batch:
                printed = tail.printed
                # plans held behind an older one that expired; printed off the event loop,
                # as below, so a reader that is slow to take stdout stalls no heartbeat
                more = await asyncio.to_thread(tail.flush)
                moved = bool(args.group) and more and await _past_markers(consumer, tail)
                if args.group and (tail.printed != printed or moved):  # what it printed
                    await consumer.commit(tail.commit_offsets())
                if not more:
                    break
                if args.timeout is not None and time.monotonic() - last_record >= args.timeout:
                    break
                continue
            last_record = time.monotonic()
            records = [(tp, r) for tp, rs in batch.items() for r in rs]
            # Writing to stdout blocks while its reader is busy (`| sh` running one command
            # after another): done on the loop, it would stall the group's heartbeats, and
            # the group would drop this member and refuse the commit of what was printed.
            if not await asyncio.to_thread(tail.handle_all, records, seen):
                stop.set()
            elif args.group:
                await _past_markers(consumer, tail)
            if args.group and tail.done:
                await consumer.commit(tail.commit_offsets())
    except CommitFailedError:
        raise DprobeError(
            f"group {args.group} took its partitions back before what was printed could be "
            "committed (stdout not read for over 5 minutes?): the next run of the group "
            "prints those events again"
        ) from None
    except KafkaError as exc:
        raise DprobeError(f"reading {topic} failed: {exc}") from None
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await _stop(consumer, joined_already=joined is None or joined.is_set())
    print(
        f"dprobe events: {count_of(tail.printed, 'event')}, "
        f"{count_of(tail.duplicates, 'duplicate')} dropped, "
        f"{count_of(tail.invalid, 'invalid record')} skipped",
        file=sys.stderr,
    )
    return 0


async def _subscribe(
    consumer: Any, topic: str, kafka: KafkaSettings, *, grouped: bool
) -> asyncio.Event | None:
    """Subscribe ``consumer`` (started) to ``topic``; a :class:`UsageError` when the topic
    does not exist. Asked first: a broker that creates topics on demand would make a
    misspelt one, and one that does not would keep the consumer waiting on its metadata.
    With a group (``grouped``), the event set once the group has given this reader its
    share of the partitions (see :func:`_join`); without, ``None``, once every partition
    is assigned."""
    from aiokafka.errors import KafkaError

    try:
        exists = topic in await consumer.topics()
    except KafkaError as exc:
        raise DprobeError(f"cannot list the topics of Kafka at {kafka.bootstrap}: {exc}") from None
    if not exists:
        raise UsageError(
            f"topic {topic} does not exist: start a worker first (it creates the topic), or "
            f"check the topic prefix (kafka.topic_prefix, now {kafka.topic_prefix!r})"
        )
    if grouped:
        from aiokafka.abc import ConsumerRebalanceListener

        joined = asyncio.Event()

        class _Joined(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                pass

            def on_partitions_assigned(self, assigned: Any) -> None:
                joined.set()  # also for an empty share of the partitions

        consumer.subscribe([topic], listener=_Joined())
        return joined
    consumer.subscribe([topic])
    deadline = time.monotonic() + ASSIGN_WAIT_S
    # without a group every partition is assigned at the next metadata update
    while not consumer.assignment():
        if time.monotonic() >= deadline:
            raise DprobeError(f"no partition of {topic} assigned after {ASSIGN_WAIT_S:g} s")
        await asyncio.sleep(0.05)
    return None


async def _join(joined: asyncio.Event, stop: asyncio.Event, topic: str, args: Any) -> None:
    """Wait until the group has given this reader its partitions (``joined``) or ``stop``.
    A join takes seconds; after :data:`JOIN_WAIT_S` it says on stderr what it waits for.
    With ``--timeout`` it gives up after that or :data:`JOIN_WAIT_S`, the longer (a
    :class:`DprobeError`); without, it waits as long as it takes."""
    limit = None if args.timeout is None else max(JOIN_WAIT_S, args.timeout)
    started = time.monotonic()
    said = False
    while not (joined.is_set() or stop.is_set()):
        waited = time.monotonic() - started
        if limit is not None and waited >= limit:
            raise DprobeError(
                f"group {args.group} gave this reader no partition of {topic} in {waited:.0f} s "
                f"(the wait for a join: --timeout {args.timeout:g}, at least {JOIN_WAIT_S:g} s): "
                f"its other members may be rebalancing, or one that stopped without leaving "
                f"holds them until its session times out"
            )
        if not said and waited >= JOIN_WAIT_S:
            said = True
            print(
                f"dprobe events: still waiting for group {args.group} to give this reader its "
                f"partitions of {topic} ({waited:.0f} s): a member that stopped without "
                f"leaving holds them until its session times out",
                file=sys.stderr,
                flush=True,
            )
        await asyncio.sleep(0.1)


async def _stop(consumer: Any, *, joined_already: bool) -> None:
    """Stop ``consumer``. One still joining its group would wait for the join to finish
    first (until a frozen member's session times out): it is given :data:`LEAVE_WAIT_S`,
    then its connections are closed without leaving (it never had partitions). A stop
    while the broker is away ends quietly too."""
    await stop_consumer(consumer, None if joined_already else LEAVE_WAIT_S)


async def _announce(consumer: Any, topic: str, args: argparse.Namespace) -> None:
    """Say on stderr where the tail starts, once that position is fixed.

    The start offsets of the partitions assigned are resolved first, so an event produced
    after this line is never missed, even from ``latest``.
    """
    where = "the beginning" if args.from_beginning else "new events"
    partitions = consumer.assignment()
    for tp in partitions:
        await consumer.position(tp)
    if args.group is None:
        n = len(partitions)
        print(f"dprobe events: reading {topic} ({n} partition{'' if n == 1 else 's'}) "
              f"from {where}", file=sys.stderr, flush=True)  # fmt: skip
    else:
        print(f"dprobe events: reading {topic} as group {args.group}, from its committed "
              f"offsets, else from {where}", file=sys.stderr, flush=True)  # fmt: skip


def _write(out: TextIO, text: str) -> bool:
    """Write one line and flush; ``False`` when stdout is a closed pipe."""
    try:
        out.write(text + "\n")
        out.flush()
    except BrokenPipeError:
        # keep the interpreter's final flush from failing again on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        return False
    return True
