"""Create dprobe's topics before anything runs, with the configured partitions.

The collector and the worker create the topics they need when they are missing, with the
configured partitions, if they may; where only an administrator may create topics, or to
choose the partitions once for the whole fleet, `dprobe topics create` creates every
topic the worker uses (samples with broker timestamps, jobs, features, dead letters,
scaling events with one partition so plans stay in order, the worker's internal and
changelog topics) and lists them. Existing topics are left as they are, with a warning
when samples or jobs has fewer partitions than configured, or when samples, cluster or
a changelog lacks the settings dprobe creates it with (broker time on samples, compaction
on the others: the warning names the command that sets them); an internal
topic of the app id with another count is an error (exit 2): every worker of an app id
uses one count, that of its topics. `dprobe topics list` only lists (exit 0, also when a
topic is missing; stderr counts them); it takes no --partitions (exit 2).

  dprobe topics create --partitions 8
  dprobe topics list
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["create", "list"], help="create missing topics, or list")
    p.add_argument("--partitions", type=int, help="partitions of samples and jobs (default 4)")
    p.add_argument("--app-id", help="the workers' app id, which names their internal topics")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from dprobe.commands._common import settings
    from dprobe.config import WorkerSettings
    from dprobe.errors import UsageError

    if args.action == "list" and args.partitions is not None:
        raise UsageError(
            "--partitions applies to `dprobe topics create` (list shows the partitions "
            "each topic has)"
        )
    from dprobe.streams.provision import changelog_topics, describe_topics, ensure_topics
    from dprobe.streams.topics import TopicNames

    s = settings(WorkerSettings, args, partitions=args.partitions, app_id=args.app_id)
    if args.action == "create":
        asyncio.run(ensure_topics(s, attempts=3))
    names = TopicNames.from_settings(s)
    internal = [names.updates, names.planning, *changelog_topics(s, s.partitions)]
    found = asyncio.run(describe_topics(s, [*names.external(), *internal]))
    for topic, count in found.items():
        print(f"{topic}\t{'missing' if count is None else f'{count} partition(s)'}")
    missing = [t for t, n in found.items() if n is None]
    if missing and args.action == "list":
        create = "dprobe topics create" + (f" --app-id {s.app_id}" if args.app_id else "")
        print(f"{len(missing)} topic(s) missing: run `{create}`", file=sys.stderr)
    return 0
