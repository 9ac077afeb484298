"""Export consumer-group lag read from Kafka, whether or not any worker runs.

Serves kafka_exporter's metric names (kafka_consumergroup_lag, kafka_consumergroup_lag_sum,
kafka_consumergroup_current_offset, kafka_topic_partition_current_offset,
kafka_topic_partitions, kafka_consumergroup_members) for the watched groups on
http://ADDR:PORT/metrics. Lag is the end offset minus the committed one; a partition the
group has not committed on yet lags by all it holds (dprobe's worker and archive start at
the oldest record), where kafka_exporter reports -1. Run one per Kafka cluster; alerts
and autoscalers read lag from it. Stop with SIGTERM or Ctrl-C; it exits 1 if polling
fails unexpectedly (its service then restarts it).

  dprobe lag                                   # groups dprobe-worker and dprobe-archive
  dprobe lag --group dprobe-worker --metrics-port 9403
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--group",
        dest="groups",
        action="append",
        metavar="GROUP",
        help="consumer group to watch (repeatable; default dprobe-worker and dprobe-archive)",
    )
    p.add_argument(
        "--topic",
        dest="topics",
        action="append",
        metavar="TOPIC",
        help="topic to report (repeatable; default: those each group has committed on)",
    )
    p.add_argument("--interval", type=float, dest="interval_s", help="seconds between reads (15)")
    p.add_argument("--metrics-addr", help="address of /metrics (default 127.0.0.1)")
    p.add_argument("--metrics-port", type=int, help="port of /metrics (default 9403)")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal
    import sys

    from prometheus_client import CollectorRegistry

    from dprobe.commands._common import settings
    from dprobe.config import LagSettings
    from dprobe.kafka_auth import check_credentials
    from dprobe.sinks.lag_exporter import LagExporter
    from dprobe.sinks.metrics_server import MetricsServer

    s = settings(
        LagSettings,
        args,
        groups=tuple(args.groups) if args.groups else None,
        topics=tuple(args.topics) if args.topics else None,
        interval_s=args.interval_s,
        metrics_addr=args.metrics_addr,
        metrics_port=args.metrics_port,
    )
    registry = CollectorRegistry()
    server = MetricsServer(registry, s.metrics_addr, s.metrics_port)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if not await check_credentials(s.kafka):
            print(
                f"Kafka at {s.kafka.bootstrap} cannot be reached now; the lag is exported "
                "once it answers",
                file=sys.stderr,
                flush=True,
            )
        async with LagExporter(s, registry) as exporter:
            server.serve()
            print(
                f"exporting the lag of {', '.join(s.groups)} on {server.url} "
                f"(every {s.interval_s:g} s)",
                file=sys.stderr,
                flush=True,
            )
            stopping = asyncio.ensure_future(stop.wait())
            failing = asyncio.ensure_future(exporter.wait())
            try:
                await asyncio.wait([stopping, failing], return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
                failing.cancel()
                server.stop()
            if failing.done() and not failing.cancelled() and failing.exception() is not None:
                # stale values must not be served as if fresh: end, so the service restarts
                print(f"dprobe lag: stopped: {failing.exception()}", file=sys.stderr, flush=True)
                return 1
            return 0

    return asyncio.run(main())
