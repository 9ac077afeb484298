"""Run the per-node GPU collector: one HostSnapshot per tick to the samples topic.

Every tick the collector reads every GPU and GPU process (NVML, or a seeded synthetic
workload), attributes each process to a tenant and a job, writes the snapshot to a disk
spool and sends the spool to Kafka (key = host) in order. While Kafka is unreachable the
spool grows (bounded); nothing is lost across broker outages or restarts. SIGTERM
flushes what it can within --shutdown-timeout and exits 0; the rest stays spooled.

Examples:
    dprobe collect --backend nvml --interval 5
    dprobe collect --backend synthetic --gpus 8 --tenants 4
    dprobe collect --backend synthetic --clock-speed 600 --interval 60 \\
        --output day.jsonl --max-ticks 1440        # a day of minutes in 2.4 min
    dprobe collect --backend nvml --once        # print one snapshot as JSON, send nothing
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from dprobe.commands._common import not_applying, settings
from dprobe.config import SYNTHETIC_MAX, CollectorSettings, check_topic_name
from dprobe.count_text import count_of
from dprobe.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=["nvml", "synthetic"],
        help="GPU data source (default: [collector] backend, else synthetic; nvml on GPU nodes)",
    )
    p.add_argument(
        "--interval",
        type=float,
        dest="interval_s",
        metavar="S",
        help="seconds between snapshots (default 10, at least 0.01)",
    )
    p.add_argument("--host-id", metavar="NAME", help="host name in snapshots (default: hostname)")
    p.add_argument("--metrics-addr", metavar="ADDR", help="/metrics address (default 127.0.0.1)")
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="/metrics port (default 9401; 0 = any free port)",
    )
    p.add_argument(
        "--spool-dir",
        metavar="DIR",
        help="disk spool folder, one subfolder per host (default ~/.cache/dprobe/spool)",
    )
    p.add_argument(
        "--spool-max-bytes",
        type=int,
        metavar="N",
        help="spool bound in bytes (default 268435456: 256 MiB; at least 1 MiB)",
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="folder of the persisted seq (default ~/.cache/dprobe/collector)",
    )
    p.add_argument(
        "--tenant-map",
        metavar="FILE",
        help="TOML mapping pods/namespaces/... to tenants (nvml backend; the synthetic "
        "backend names its own tenants: it checks a map given but does not use it)",
    )
    p.add_argument(
        "--tenant-env",
        dest="tenant_env_vars",
        metavar="VARS",
        help="comma-separated environment variables allowed to name a tenant",
    )
    p.add_argument("--proc-root", metavar="DIR", help="procfs to read (default /proc)")
    p.add_argument("--topic", help="destination topic (default <prefix>samples)")
    syn = p.add_argument_group("synthetic backend")
    syn.add_argument("--seed", type=int, help="random seed (default 0)")
    syn.add_argument(
        "--tenants",
        type=int,
        metavar="N",
        help=f"number of tenants (default 4, at most {SYNTHETIC_MAX['tenants']:,})",
    )
    syn.add_argument(
        "--gpus",
        type=int,
        dest="synthetic_gpus",
        metavar="N",
        help=f"GPUs (default 8, at most {SYNTHETIC_MAX['synthetic_gpus']:,})",
    )
    syn.add_argument(
        "--procs-per-gpu",
        type=int,
        dest="synthetic_procs_per_gpu",
        metavar="N",
        help="processes that may share a GPU "
        f"(default 2, at most {SYNTHETIC_MAX['synthetic_procs_per_gpu']:,})",
    )
    syn.add_argument(
        "--clock-speed",
        type=float,
        metavar="X",
        help="run time X times faster than the wall clock (default 1)",
    )
    run_group = p.add_argument_group("run control")
    run_group.add_argument(
        "--once",
        action="store_true",
        help="print one snapshot as JSON on stdout and exit; sends nothing",
    )
    run_group.add_argument(
        "--output",
        metavar="FILE|-",
        help="write each snapshot as one JSON line to FILE ('-': stdout) instead of Kafka; "
        "appended to a FILE that exists, with seq from 0 again; no spool, no /metrics "
        "(for checks and debugging)",
    )
    run_group.add_argument("--max-ticks", type=int, metavar="N", help="stop after N snapshots")
    run_group.add_argument(
        "--no-send", action="store_true", help="spool only, do not connect to Kafka"
    )
    run_group.add_argument(
        "--shutdown-timeout",
        type=float,
        dest="shutdown_timeout_s",
        metavar="S",
        help="seconds to flush on SIGTERM (default 10)",
    )


_SETTING_FLAGS = (
    "backend",
    "interval_s",
    "host_id",
    "metrics_addr",
    "metrics_port",
    "spool_dir",
    "spool_max_bytes",
    "state_dir",
    "tenant_map",
    "tenant_env_vars",
    "proc_root",
    "seed",
    "tenants",
    "synthetic_gpus",
    "synthetic_procs_per_gpu",
    "clock_speed",
    "shutdown_timeout_s",
)


# flags of the service only: --once and --output send nothing, spool nothing, serve nothing
_SERVICE_ONLY = (
    ("--topic", "topic"),
    ("--no-send", "no_send"),
    ("--metrics-addr", "metrics_addr"),
    ("--metrics-port", "metrics_port"),
    ("--spool-dir", "spool_dir"),
    ("--spool-max-bytes", "spool_max_bytes"),
    ("--state-dir", "state_dir"),
    ("--shutdown-timeout", "shutdown_timeout_s"),
)


def check_flags_apply(args: argparse.Namespace) -> None:
    """Refuse a flag given with ``--once`` or ``--output`` that would change nothing."""
    if not (args.once or args.output):
        return
    # 0 is a value given (--metrics-port 0: any free port), False a switch left off
    given = [
        flag
        for flag, name in _SERVICE_ONLY
        if (value := getattr(args, name)) is not None and value is not False
    ]
    if args.once:
        given += ["--max-ticks"] if args.max_ticks is not None else []
        why = "with --once (it prints one snapshot; no Kafka, spool or /metrics)"
    else:
        why = "with --output (snapshots go to the file; no Kafka, spool or /metrics)"
    if given:
        raise not_applying(given, why)


def check_tenant_map(s: CollectorSettings) -> None:
    """Refuse a ``tenant_map`` file that cannot be read or holds a bad mapping."""
    if s.tenant_map:
        from dprobe.collectors.tenant_map import load_tenant_map

        load_tenant_map(s.tenant_map)


def check_on_start(s: CollectorSettings) -> None:
    """What the collector refuses on start beyond its settings (``dprobe config check``
    runs it too): the tenant map, and an NVML ``proc_root`` that is not a procfs."""
    from dprobe.collectors.assemble import check_proc_root

    check_tenant_map(s)
    check_proc_root(s)


def run(args: argparse.Namespace) -> int:
    import asyncio

    if args.host_id == "":  # "$NODE_NAME" unset: the host name would be a pod's
        raise UsageError(
            "--host-id is empty: give the node's name, or leave the flag out for the host name"
        )
    cli: dict[str, Any] = {name: getattr(args, name, None) for name in _SETTING_FLAGS}
    s = settings(CollectorSettings, args, **cli)
    check_tenant_map(s)  # whatever the backend, before --output or a spool is touched
    if args.max_ticks is not None and args.max_ticks < 1:
        raise UsageError("--max-ticks must be >= 1")
    if args.topic is not None:
        check_topic_name("--topic", args.topic)
    check_flags_apply(args)
    if args.once:
        if args.output:  # the file asked for would not be written
            raise not_applying(
                ["--output"],
                "with --once (it prints one snapshot on stdout; for a file: "
                "--output FILE --max-ticks 1)",
            )
        return asyncio.run(_once(s))
    if args.output:
        return asyncio.run(_write_lines(s, args.output, args.max_ticks))
    return asyncio.run(_serve(s, args))


def _open_output(output: str) -> BinaryIO:
    """``--output``'s file, appended to (``-``: stdout); :class:`UsageError` naming why not."""
    if output == "-":
        return sys.stdout.buffer
    try:
        return open(output, "ab")  # closed by _write_lines
    except OSError as exc:
        raise UsageError(f"--output {output}: {exc.strerror or exc}") from None


def _unavailable(exc: Exception, backend: str) -> UsageError:
    hint = " (is the NVIDIA driver installed? try --backend synthetic)" if backend == "nvml" else ""
    return UsageError(f"{backend} backend unavailable: {exc}{hint}")


def _snapshot_source(s: CollectorSettings, on_fault: Callable[[str], None]) -> tuple[Any, ...]:
    """``(host, clock, backend, build)`` of a collector that runs without Kafka."""
    import socket

    from dprobe.collectors.assemble import make_backend, make_clock, make_resolver
    from dprobe.collectors.snapshot import SnapshotBuilder

    host = s.host_id or socket.gethostname()
    clock = make_clock(s.clock_speed)
    backend = make_backend(s, host, clock)
    return host, clock, backend, SnapshotBuilder(host, make_resolver(s), on_fault)


async def _once(s: CollectorSettings) -> int:
    from dprobe.collectors.errors import BackendError
    from dprobe.schema import to_builtins

    faults: list[str] = []
    _host, clock, backend, build = _snapshot_source(s, faults.append)
    try:
        async with backend:
            reading = await backend.read()
    except BackendError as exc:
        raise _unavailable(exc, s.backend) from None
    snap = build(reading, seq=0, ts=clock.now(), interval_s=s.interval_s)
    print(json.dumps(to_builtins(snap), indent=2))
    for err in reading.errors:
        print(f"dprobe collect: {err}", file=sys.stderr)
    if faults:
        print(f"dprobe collect: repaired values: {', '.join(sorted(set(faults)))}", file=sys.stderr)
    return 0


async def _write_lines(s: CollectorSettings, output: str, max_ticks: int | None) -> int:
    """Read the backend every interval; one JSON line per snapshot to ``output``, opened
    once the backend has started (one that cannot start leaves no empty file behind)."""
    import asyncio
    import signal

    from dprobe.collectors.errors import BackendError, CollectorError
    from dprobe.schema import encode

    host, clock, backend, build = _snapshot_source(s, lambda _field: None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    seq = 0
    out: BinaryIO | None = None
    try:
        async with backend:
            out = _open_output(output)
            next_at = clock.monotonic()
            while not stop.is_set() and (max_ticks is None or seq < max_ticks):
                try:
                    reading = await backend.read()
                except BackendError as exc:
                    if not exc.retriable:
                        raise
                    # a slow or busy read: this tick gives no snapshot, the next may
                    print(f"dprobe collect: tick skipped: {exc}", file=sys.stderr)
                else:
                    snap = build(reading, seq=seq, ts=clock.now(), interval_s=s.interval_s)
                    try:
                        out.write(encode(snap) + b"\n")
                        out.flush()
                    except BrokenPipeError:
                        raise  # stdout's reader has gone: dprobe ends quietly
                    except OSError as exc:  # a full disk, a file system gone read-only
                        raise CollectorError(f"--output {output}: {exc.strerror or exc}") from None
                    for err in reading.errors:
                        print(f"dprobe collect: {err}", file=sys.stderr)
                    seq += 1
                    if max_ticks is not None and seq >= max_ticks:
                        break
                # ticks on a fixed grid, so the time a tick takes does not add up; one
                # that fell behind (a slow read) skips ahead instead of bursting
                now = clock.monotonic()
                next_at = max(next_at + s.interval_s, now)
                wait = next_at - now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait / max(s.clock_speed, 1e-9))
    except BackendError as exc:
        raise _unavailable(exc, s.backend) from None
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if out is not None and out is not sys.stdout.buffer:
            with contextlib.suppress(OSError):  # a failed write was said already
                out.close()
    print(
        f"dprobe collect: wrote {count_of(seq, 'snapshot')} of host {host} to {output}",
        file=sys.stderr,
    )
    return 0


async def _serve(s: CollectorSettings, args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    from prometheus_client import CollectorRegistry

    from dprobe.collectors.assemble import build_collector
    from dprobe.collectors.errors import BackendError, CollectorError
    from dprobe.collectors.metrics import MetricsServer

    log = logging.getLogger("dprobe.collect")
    registry = CollectorRegistry()
    collector = build_collector(
        s, registry=registry, send=not args.no_send, topic=args.topic, max_ticks=args.max_ticks
    )
    server = MetricsServer(registry, s.metrics_addr, s.metrics_port)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, collector.request_stop)
    try:
        try:
            await collector.start()
        except BackendError as exc:
            raise _unavailable(exc, s.backend) from None
        except OSError as exc:  # spool or state folder not writable
            raise UsageError(f"cannot use the spool or state folder: {exc}") from None
        server.serve()
        pace = f"every {s.interval_s:g} s"
        if s.clock_speed != 1.0:  # an accelerated (or slowed) clock: say what a tick is
            pace += (
                f" of event time on a {s.clock_speed:g}x clock "
                f"(every {s.interval_s / s.clock_speed:.3g} s of wall time)"
            )
        log.info("collecting host %s %s with the %s backend", collector.host, pace, s.backend)
        if s.clock_speed > 1.0 and not args.no_send:
            log.warning(
                "a %gx clock runs ahead of the wall clock: a worker dead-letters snapshots "
                "stamped more than max_clock_skew_s after they reach Kafka (clock_skew), "
                "so use it with --output or --no-send, or try `dprobe demo`",
                s.clock_speed,
            )
        try:
            await collector.wait()
        except Exception as exc:
            raise CollectorError(f"collector failed: {exc}") from exc
    finally:
        await collector.stop()
        server.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    log.info(
        "stopped after %s; %d left in the spool",
        count_of(collector.ticks, "snapshot"),
        collector.spool.pending_records,
    )
    return 0
