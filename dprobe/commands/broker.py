"""Start, stop or check the local single-node Apache Kafka broker (KRaft, 127.0.0.1).

The broker jars come from Maven Central on first start (cached); no Docker is needed.
Requires Java 17+ and Maven. ``status`` prints the state (``stopped``, ``starting`` or
``ready``) and the broker's address, e.g. ``ready 127.0.0.1:9092``, and exits 0 only when
ready; it looks at the broker of the state dir, and says on stderr when that one is not
where ``--bootstrap`` (or, without it, ``--port``) points. ``fetch`` only collects the
jars (what ``make install`` runs), so that a later ``start`` needs no network.

  dprobe broker start     # idempotent: a running broker is left alone
  dprobe broker status    # e.g. "stopped 127.0.0.1:9092" (a running one: its own port)
  dprobe broker stop      # SIGTERM, SIGKILL after 30 s; no broker process is left
  dprobe broker fetch     # download the broker jars now (no-op when cached)

Settings ([broker] in the config file, or DPROBE_BROKER_*): port, controller_port,
state_dir, lib_dir, heap, start_timeout_s; sasl_user with sasl_password make the client
port speak SASL_PLAINTEXT with SCRAM-SHA-512 and that one user.
"""

from __future__ import annotations

import argparse
import sys

from dprobe.commands._common import settings
from dprobe.config import BrokerSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["start", "stop", "status", "fetch"])
    p.add_argument("--port", type=int, help="client port (default 9092)")
    p.add_argument("--controller-port", type=int, help="KRaft controller port (default 9093)")
    p.add_argument("--state-dir", help="data, logs and pid file (default ~/.cache/dprobe/broker)")


def run(args: argparse.Namespace) -> int:
    from dprobe.broker import LocalBroker

    cfg = settings(
        BrokerSettings,
        args,
        port=args.port,
        controller_port=args.controller_port,
        state_dir=args.state_dir,
    )
    broker = LocalBroker(cfg)
    if args.action == "start":
        print(broker.start())
        return 0
    if args.action == "stop":
        for note in broker.stop():
            print(f"dprobe broker: {note}", file=sys.stderr)
        print("stopped")
        return 0
    if args.action == "fetch":
        broker.fetch()
        return 0
    state, address = broker.status_and_address()
    print(f"{state} {address}")
    note = status_note(state, address, cfg, getattr(args, "bootstrap", None))
    if note:
        print(f"dprobe broker: {note}", file=sys.stderr)
    return 0 if state == "ready" else 1


LOCAL_HOSTS = ("127.0.0.1", "localhost")


def status_note(state: str, address: str, cfg: BrokerSettings, asked: str | None) -> str:
    """What ``status`` adds on stderr when the broker of the state dir is not at the
    address asked about: ``--bootstrap`` where given, else the configured port ('' when
    it is there).

    >>> from pathlib import Path
    >>> cfg = BrokerSettings(port=9092, state_dir=Path("/b"))
    >>> status_note("ready", "127.0.0.1:9092", cfg, "localhost:9092")
    ''
    >>> print(status_note("ready", "127.0.0.1:9092", cfg, "127.0.0.1:19092"))
    ... # doctest: +NORMALIZE_WHITESPACE
    the broker of /b listens on 127.0.0.1:9092, not on 127.0.0.1:19092 (--bootstrap):
    status looks at the broker of a state dir (--state-dir), not at an address
    >>> status_note("ready", "127.0.0.1:19092", cfg, None)
    'the broker of /b listens on 127.0.0.1:19092, not 127.0.0.1:9092'
    """
    if not asked:
        wanted = f"127.0.0.1:{cfg.port}"
        return "" if address == wanted else (
            f"the broker of {cfg.state_dir} listens on {address}, not {wanted}"
        )  # fmt: skip
    port = address.rpartition(":")[2]
    for server in asked.split(","):
        host, _, asked_port = server.strip().rpartition(":")
        if host in LOCAL_HOSTS and asked_port == port:
            return ""
    listens = "would listen on" if state == "stopped" else "listens on"
    return (
        f"the broker of {cfg.state_dir} {listens} {address}, not on {asked} (--bootstrap): "
        "status looks at the broker of a state dir (--state-dir), not at an address"
    )
