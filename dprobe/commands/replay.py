"""Replay an archive or a public trace into Kafka, in event-time order.

Formats: dprobe-parquet (a `dprobe archive` folder: samples, job events and cluster
reports, byte for byte), demand-csv (ts,tenant,demand_gpus[,quota_gpus]) and helios-vc
(a Helios per-VC minute CSV, or a folder of them): running GPUs become synthetic hosts
with one whole-GPU process per running GPU, pending GPUs a pending job per tenant;
jobs-csv (Philly/Chronus): submit/start/finish job events (a job starts when submitted)
and synthetic hosts of the running jobs. See docs/replay.md.

Replays write to topics of their own, dprobe-replay.samples, .jobs and .cluster (quotas
a trace carries), so live workers never see history as late data; run a worker on them
with DPROBE_KAFKA_TOPIC_PREFIX=dprobe-replay. (the command prints the line). --prefix
changes the prefix; --prefix dprobe. writes into the live topics on purpose.

--speed is event seconds per wall second (1 = real time, 600 = 10 minutes a second,
0 or max = as fast as possible, at least 0.001). Malformed rows are skipped with a message
naming file and line; --strict stops at the first one (exit 2).

  dprobe replay archive/ --format dprobe-parquet --speed max
  dprobe replay ../shared/data/helios-earth-vcs/vc6YE.csv.gz --format helios-vc --speed 600
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TypeVar

from dprobe.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterator

    from dprobe.config import ReplaySettings
    from dprobe.traces.replay_record import ReplayRecord

FORMATS = ("dprobe-parquet", "demand-csv", "helios-vc", "jobs-csv")
T = TypeVar("T")


def _speed(text: str) -> float:
    if text.strip().lower() in {"max", "inf", "0"}:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'max': {text!r}") from None
    if value == float("inf"):  # as 'inf' is
        return 0.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 or 'max', got {text!r}")
    from dprobe.config import MIN_REPLAY_SPEED, too_slow

    if 0 < value < MIN_REPLAY_SPEED:
        raise argparse.ArgumentTypeError(f"must be 0 or 'max', or at least {too_slow(value)}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="archive folder or file, or a trace file/folder")
    p.add_argument("--format", dest="fmt", required=True, choices=FORMATS, help="input format")
    p.add_argument(
        "--speed",
        type=_speed,
        help="event seconds per wall second, at least 0.001; 0 or max = as fast as possible (0)",
    )
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="[KIND=]TOPIC",
        help="target topic: TOPIC for the main kind (jobs for jobs-csv, else samples) or "
        "samples=TOPIC / jobs=TOPIC / cluster=TOPIC (repeatable; default PREFIX + kind)",
    )
    p.add_argument(
        "--prefix",
        dest="topic_prefix",
        metavar="PREFIX",
        help="prefix of the target topics (default dprobe-replay.; dprobe. = the live topics)",
    )
    p.add_argument("--strict", action="store_true", help="stop at the first malformed row (exit 2)")
    p.add_argument(
        "--shift-to-now",
        action="store_true",
        help="move event times so the replay ends now (at real time: the first record is now)",
    )
    p.add_argument("--hours", type=float, help="replay only the first H hours of event time")
    p.add_argument(
        "--tick",
        type=float,
        dest="tick_s",
        help="telemetry tick of the synthetic hosts in seconds, at least 0.01; not with "
        "dprobe-parquet (60 s)",
    )
    p.add_argument(
        "--gpus-per-host", type=int, help="GPUs per synthetic host, not with dprobe-parquet (8)"
    )
    p.add_argument(
        "--time-unit",
        type=float,
        dest="jobs_time_unit_s",
        help="--format jobs-csv only: seconds per time unit (60)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def open_trace(
    args: argparse.Namespace, s: ReplaySettings, **kw: Any
) -> tuple[Iterator[ReplayRecord], int | None]:
    """The records of ``args.path`` in ``args.fmt`` as the settings lay them out
    (``open_source``; ``kw``: ``strict``, ``on_bad``)."""
    from dprobe.traces.replay_demand import DemandLayout
    from dprobe.traces.replay_sources import open_source

    layout = DemandLayout(tick_s=s.tick_s, gpus_per_host=s.gpus_per_host)
    # given on the command line: a header in seconds, which it does not apply to, refuses it
    flag = "--time-unit" if args.jobs_time_unit_s is not None else None
    return open_source(
        args.path,
        args.fmt,
        layout=layout,
        time_unit_s=s.jobs_time_unit_s,
        time_unit_flag=flag,
        **kw,
    )


def event_span_s(args: argparse.Namespace, s: ReplaySettings) -> float:
    """Seconds of event time from the first record of the source to its last, or to the
    last of its first ``--hours`` (one pass over them, malformed rows passed over
    silently: the replay itself reports them)."""
    from dprobe.traces.replay_sources import first_hours

    records, _ = open_trace(args, s)
    if args.hours is not None:
        records = first_hours(records, args.hours)
    first = last = None
    for rec in records:
        first = rec.ts if first is None else first
        last = rec.ts
    return 0.0 if first is None or last is None else last - first


def run(args: argparse.Namespace) -> int:
    """Run the replay; Ctrl-C or SIGTERM before the first record is sent (while the trace
    is read for its span, say) ends it with one line, as it does later on."""
    import signal
    import sys

    from dprobe.signal_handlers import handled

    def terminate(_signum: int, _frame: object) -> None:
        raise Terminated

    try:
        with handled((signal.SIGTERM,), terminate):
            return _run(args)
    except (KeyboardInterrupt, Terminated) as exc:
        how = "stopped (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"dprobe replay: {how} before any record was sent", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import itertools
    import math
    import sys
    import time

    from tqdm import tqdm

    from dprobe.commands._common import settings
    from dprobe.config import ReplaySettings
    from dprobe.traces.replay import ReplayError
    from dprobe.traces.replay_kafka import replay_to_kafka, topics_for
    from dprobe.traces.replay_sources import first_hours

    s = settings(
        ReplaySettings,
        args,
        speed=args.speed,
        tick_s=args.tick_s,
        gpus_per_host=args.gpus_per_host,
        jobs_time_unit_s=args.jobs_time_unit_s,
        topic_prefix=args.topic_prefix,
    )
    if args.hours is not None and not args.hours > 0:
        raise UsageError("--hours must be > 0")
    # a flag that would be ignored is refused, not dropped (values are checked above)
    if args.jobs_time_unit_s is not None and args.fmt != "jobs-csv":
        raise UsageError("--time-unit applies only with --format jobs-csv")
    if args.fmt == "dprobe-parquet":
        for flag, value in (("--tick", args.tick_s), ("--gpus-per-host", args.gpus_per_host)):
            if value is not None:
                raise UsageError(
                    f"{flag} does not apply with --format dprobe-parquet "
                    "(an archive replays its own records)"
                )
    topics = topics_for(s, args.topic, primary="jobs" if args.fmt == "jobs-csv" else "samples")
    bad: list[str] = []

    def on_bad(msg: str) -> None:
        bad.append(msg)
        tqdm.write(f"skipped malformed row: {msg}", file=sys.stderr)

    records, total = open_trace(args, s, strict=args.strict, on_bad=on_bad)
    if args.hours is not None:
        records = first_hours(records, args.hours)
        total = None
    span_s = 0.0
    if args.shift_to_now and not 0 < s.speed <= 1:  # event time would run ahead of the clock
        # the span the records cover (--hours H: of the first H hours, which may be less
        # than H when the trace is shorter), so that the replay ends now
        whole = args.hours is None or args.hours == float("inf")
        what = "the trace" if whole else f"the first {args.hours:g} h of the trace"
        print(
            f"--shift-to-now: reading {what} once for its span, so the replay ends now",
            file=sys.stderr,
        )
        span_s = event_span_s(args, s)
    # read up to the first record before connecting, so a wrong file is named first
    records = iter(records)
    first = next(records, None)
    if first is None:
        raise UsageError(f"{args.path}: no record to replay ({len(bad)} malformed row(s) skipped)")
    records = itertools.chain([first], records)
    speed = "max" if s.speed == 0 else f"x{s.speed:g}"
    print(
        f"replaying {args.path} ({args.fmt}) at speed {speed} into "
        f"{', '.join(sorted(set(topics.values())))}",
        file=sys.stderr,
    )
    age_days = (time.time() - first.ts) / 86400
    if not args.shift_to_now and age_days > 1:
        print(
            f"note: event time starts at {_minute(first.ts)} UTC ({age_days:,.0f} days ago); "
            "windows, events and dashboards will show that time; --shift-to-now moves it to now",
            file=sys.stderr,
        )
    if not s.into_live_topics and not args.topic:
        print(f"a worker reads them with: {worker_command(args, s)}", file=sys.stderr)
    live = sorted(t for k, t in topics.items() if t == s.kafka.topic(k))
    if live:
        are = "is a live topic" if len(live) == 1 else "are live topics"
        print(
            f"warning: {', '.join(live)} {are}"
            ": workers already past this data's "
            "event time drop it as late (dprobe_late_partials_total); replay into a prefix "
            "of its own (the default, dprobe-replay.) to evaluate history",
            file=sys.stderr,
        )
    bar = tqdm(
        total=total,
        unit="msg",
        file=sys.stderr,
        disable=args.no_progress,
        mininterval=0.5,
        dynamic_ncols=True,
    )

    reached: list[float] = []
    sent = [0]  # records handed to the producer (the bar may be off: --no-progress)
    delivered = [0]  # of them, those Kafka has confirmed

    def on_existing(existing: list[str]) -> None:
        others = [t for t in existing if t not in live]
        if others:
            print(
                f"note: {', '.join(others)} already held records: a worker that has read them "
                "takes this data's event times as late or its hosts' seqs as duplicates, "
                "and a new one reads the earlier data too; replay history once per prefix "
                "(--prefix gives this replay topics of its own)",
                file=sys.stderr,
            )

    shown = [-math.inf]  # the event-time minute the bar shows

    def on_record(rec: ReplayRecord) -> None:
        reached[:] = [rec.ts]
        sent[0] += 1
        if rec.ts // 60 != shown[0]:  # how far in event time the replay is, to the minute
            shown[0] = rec.ts // 60
            bar.set_postfix_str(_minute(rec.ts), refresh=False)
        bar.update(1)

    try:
        stats = asyncio.run(
            _until_terminated(
                replay_to_kafka(
                    records,
                    s,
                    topics,
                    shift_to_now=args.shift_to_now,
                    span_s=span_s,
                    on_record=on_record,
                    on_existing=on_existing,
                    on_delivered=lambda n: delivered.__setitem__(0, n),
                )
            )
        )
    except (KeyboardInterrupt, Terminated) as exc:
        bar.close()
        if not sent[0]:  # while it connected or created the topics: said by run()
            raise
        how = "stopped (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        # a second Ctrl-C or SIGTERM ends the wait for the last deliveries (Kafka gone)
        if delivered[0] >= sent[0]:
            fate = "those sent are delivered"
        else:
            fate = (
                f"{delivered[0]} of them delivered, the last {sent[0] - delivered[0]} "
                f"maybe not (Kafka at {s.kafka.bootstrap})"
            )
        print(
            f"dprobe replay: {how} after {_records(sent[0])} sent (event time "
            f"{_when(reached)} UTC); {fate}",
            file=sys.stderr,
        )
        return 143 if isinstance(exc, Terminated) else 130
    except UsageError as exc:  # a file found bad once the replay was under way
        if not sent[0]:
            raise
        raise UsageError(
            f"{exc}; stopped after {_records(sent[0])} sent (event time {_when(reached)} UTC), "
            "those sent are delivered: a rerun into the same topics sends them again"
        ) from None
    except ReplayError as exc:
        raise ReplayError(
            f"{exc} (Kafka at {s.kafka.bootstrap}), after {_records(sent[0])} sent (event time "
            f"{_when(reached)} UTC); the last of them may not have been delivered"
        ) from None
    else:  # the bar ends on the event time reached, not that of its last update
        if reached:
            bar.set_postfix_str(_minute(reached[0]), refresh=False)
    finally:
        bar.close()
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(stats.by_kind.items())) or "nothing"
    span = ""
    if stats.first_ts is not None and stats.last_ts is not None:
        span = f", {(stats.last_ts - stats.first_ts) / 3600:.2f} h of event time"
    print(
        f"replayed {_records(stats.records)} ({kinds}){span} in {stats.wall_s:.1f} s; "
        f"{len(bad)} malformed row(s) skipped",
        file=sys.stderr,
    )
    return 0


class Terminated(Exception):
    """SIGTERM stopped the replay, as Ctrl-C does: its clean-up ran (what was sent is
    delivered), so a replay stopped by a service manager says how far it got too."""


async def _until_terminated(work: Awaitable[T]) -> T:
    """Await ``work``; SIGTERM cancels it, as Ctrl-C does, then raises :class:`Terminated`."""
    import asyncio
    import signal

    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    terminated = False

    def stop() -> None:
        nonlocal terminated
        terminated = True
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, stop)
    try:
        return await task
    except asyncio.CancelledError:
        if terminated:
            raise Terminated from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _records(n: int) -> str:
    """``n`` records, as the count lines say it.

    >>> _records(1), _records(8062)
    ('1 record', '8062 records')
    """
    return f"{n} record{'' if n == 1 else 's'}"


def _minute(ts: float) -> str:
    """``ts`` as the progress bar and the start note show it (UTC, to the minute)."""
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def _when(reached: list[float]) -> str:
    """The event time of the last record sent (``-``: none)."""
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(reached[0])) if reached else "-"


def worker_command(args: argparse.Namespace, s: ReplaySettings) -> str:
    """The command line of a worker that reads the replay's topics: their prefix, the
    ``--config`` and ``--bootstrap`` the replay was given, an app id and data folder of
    the prefix's own, /metrics on a free port.

    >>> from dprobe.config import KafkaSettings, ReplaySettings
    >>> s = ReplaySettings(kafka=KafkaSettings(bootstrap="k1:9092"), topic_prefix="bs.")
    >>> ns = argparse.Namespace(config="r.toml", bootstrap="k1:9092")
    >>> worker_command(ns, s).split(" worker ")[0]
    'DPROBE_KAFKA_TOPIC_PREFIX=bs. dprobe --config r.toml --bootstrap k1:9092'
    """
    import shlex

    name = s.topic_prefix.rstrip(".-_") + "-worker"
    given = [
        f"{flag} {shlex.quote(value)}"
        for flag, value in (("--config", args.config), ("--bootstrap", args.bootstrap))
        if value
    ]
    return " ".join(
        [
            f"DPROBE_KAFKA_TOPIC_PREFIX={shlex.quote(s.topic_prefix)} dprobe",
            *given,
            f"worker --app-id {name} --data-dir ~/.cache/dprobe/{name} --metrics-port 0",
        ]
    )
