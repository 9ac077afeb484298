"""Everything on one machine, on an accelerated clock, finishing by itself.

Starts the local Kafka broker when none answers at the bootstrap address (and stops it
at the end unless --keep-broker), creates fresh topics for this run, runs a stream
worker and synthetic collectors for several tenants on several hosts, prints scaling
events as they happen and serves the worker's /metrics. After --duration seconds of
telemetry (a day's rhythm in minutes: demand moves from tenant to tenant) it prints a
summary (windows, forecasts, events, consumer lag, forecast error) and writes a PNG of
demand vs forecast vs quota per tenant. The whole run takes --duration plus about 15
seconds (the worker's start-up, the end; more when the broker has to start). The run's
topics are deleted at the end unless --keep-broker. Ctrl-C (or SIGTERM) at any point,
while the broker starts too, stops everything it started (a broker still starting even
with --keep-broker) and says so on its last line.

Exit 0 after the summary; 1 when a part failed (the worker's last log lines are printed);
130 on Ctrl-C or SIGTERM.

Examples:
    dprobe demo
    dprobe demo --duration 60 --tenants 3 --hosts 12 --out /tmp/demo
    dprobe --bootstrap 127.0.0.1:19092 demo --keep-broker
"""

from __future__ import annotations

import argparse

from dprobe.demo.plan import DEFAULT_DURATION_S, DEFAULT_SPEED


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--duration",
        type=float,
        metavar="S",
        default=DEFAULT_DURATION_S,
        help=f"wall seconds of telemetry (default {DEFAULT_DURATION_S:g})",
    )
    p.add_argument("--tenants", type=int, metavar="N", default=4, help="tenants (default 4)")
    p.add_argument("--hosts", type=int, metavar="N", default=8, help="GPU hosts, 4 GPUs each (8)")
    p.add_argument(
        "--speed",
        type=float,
        metavar="X",
        default=DEFAULT_SPEED,
        help=f"event time runs X times faster than the wall clock (default {DEFAULT_SPEED:g})",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        default="dprobe-demo",
        help="folder of the chart (demo.png) and the worker's log (default ./dprobe-demo)",
    )
    p.add_argument(
        "--keep-broker",
        action="store_true",
        help="keep this run's topics, and leave a broker the demo started running",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import importlib.util
    import logging
    import os
    import shlex
    import sys
    from pathlib import Path

    # the worker it starts needs the worker's extras: say so before starting anything
    # (one imported already is there: faust's lazy module has no __spec__ to look up)
    for module in ("faust", "torch", "matplotlib"):
        if module not in sys.modules and importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    from dprobe.commands._common import settings
    from dprobe.config import BrokerSettings, KafkaSettings, WorkerSettings
    from dprobe.demo.interrupts import signals_ignored, terminate_interrupts
    from dprobe.demo.out_dir import prepare_out_dir
    from dprobe.demo.plan import DemoPlan
    from dprobe.demo.processes import broker_to_start, stop_command
    from dprobe.demo.report import report
    from dprobe.demo.run import Demo

    def say(line: str) -> None:
        print(f"dprobe demo: {line}", file=sys.stderr, flush=True)

    # Ctrl-C (or SIGTERM) at any point, the broker's start included, ends the same way:
    # everything started is stopped, one line says so last, exit 130
    broker = None
    interrupted = False
    launched = False  # the demo began to start its broker
    started = False  # the broker the demo started is ready (kept with --keep-broker)
    with terminate_interrupts():
        try:
            plan = DemoPlan(
                duration_s=args.duration,
                tenants=args.tenants,
                hosts=args.hosts,
                speed=args.speed,
            )
            out_dir = prepare_out_dir(Path(args.out))
            kafka = settings(KafkaSettings, args)
            if args.log_level == "INFO":  # the demo's own lines say what happens
                for name in ("aiokafka", "dprobe.collectors", "dprobe.sinks", "dprobe.streams"):
                    logging.getLogger(name).setLevel(logging.WARNING)
            broker = broker_to_start(kafka.bootstrap, settings(BrokerSettings, args))
            demo = Demo(
                plan,
                kafka,
                out_dir=out_dir,
                config_file=getattr(args, "config", None) or os.environ.get("DPROBE_CONFIG"),
                keep_topics=args.keep_broker,
                # worker.metrics_port (config file or DPROBE_WORKER_METRICS_PORT) when free
                metrics_port=settings(WorkerSettings, args).metrics_port,
                say=say,
            )
            if broker is not None:
                say(f"no broker answered at {kafka.bootstrap}: starting the local one")
                launched = True
                broker.start()
                started = True
            outcome = asyncio.run(demo.run())
            interrupted = outcome.interrupted
            code = report(outcome, plan, out_dir, say=say)
            if args.keep_broker:
                say(f"this run's topics are kept: DPROBE_KAFKA_TOPIC_PREFIX={plan.topic_prefix} "
                    f"dprobe --bootstrap {shlex.quote(kafka.bootstrap)} events "
                    "--from-beginning")  # fmt: skip
        except KeyboardInterrupt:
            interrupted, code = True, 130
        finally:
            kept = broker is not None and started and args.keep_broker
            with signals_ignored():  # a second Ctrl-C does not leave the broker half stopped
                if broker is not None and launched and not kept:
                    why = (
                        "--keep-broker leaves it running"
                        if started
                        else "still starting"
                        if interrupted
                        else "its start failed"
                    )
                    say(f"stopping the broker the demo started ({why})")
                    for note in broker.stop():
                        say(note)
                elif broker is not None and kept:
                    say(f"the broker the demo started keeps running at {broker.bootstrap} "
                        f"({stop_command(broker.settings)} stops it)")  # fmt: skip
            if interrupted:
                stopped = "everything but the broker stopped" if kept else "everything stopped"
                say(f"interrupted: {stopped}, no chart written")
    return code
