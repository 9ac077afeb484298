"""The processes a demo runs beside itself: the local broker (when none answers) and a worker.

Example:
    >>> parse_bootstrap("127.0.0.1:9092,other:9092")
    ('127.0.0.1', 9092)
    >>> is_local("localhost"), is_local("kafka-1")
    (True, False)
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from dprobe.broker import LocalBroker
from dprobe.config import BrokerSettings
from dprobe.errors import DprobeError, UsageError

WORKER_METRICS_PORT = 9402
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # terminal control sequences (spinners)


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """Host and port of the first bootstrap server."""
    first = bootstrap.split(",", maxsplit=1)[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"bootstrap {bootstrap!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def is_local(host: str) -> bool:
    return host in {"127.0.0.1", "localhost", "::1"}


def answers(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """True when something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def broker_to_start(bootstrap: str, settings: BrokerSettings) -> LocalBroker | None:
    """The local broker to start when nothing answers at ``bootstrap``, else ``None``.

    A bootstrap on another machine that does not answer is an error: the demo starts
    brokers on this machine only. A port other than the configured broker's gets a broker
    of its own (state in ``<state_dir>-<port>``). A broker of the state dir that runs but
    does not answer (another port, or starting) is an error naming its address: the demo
    would stop at its end a broker it did not start.
    """
    host, port = parse_bootstrap(bootstrap)
    if answers(host, port):
        return None
    if not is_local(host):
        raise DprobeError(f"no Kafka broker answers at {bootstrap}")
    if port != settings.port:  # not the configured broker: its own ports and state
        settings = replace(
            settings,
            port=port,
            controller_port=free_port(settings.controller_port),
            state_dir=Path(f"{settings.state_dir}-{port}"),
        )
    broker = LocalBroker(settings)
    state, address = broker.status_and_address()
    if state == "stopped":
        return broker
    # the state dir's broker runs, yet does not answer at the bootstrap (another port, or
    # still starting): not the demo's to start, nor to stop at its end
    where = f"no Kafka broker answers at {bootstrap}; the local broker of {settings.state_dir}"
    if parse_bootstrap(address)[1] == port:
        raise DprobeError(f"{where} is still starting: run the demo again once it is ready")
    raise UsageError(
        f"{where} runs at {address}: run the demo with --bootstrap {address}, "
        f"or stop that broker first ({stop_command(settings)})"
    )


def stop_command(settings: BrokerSettings) -> str:
    """The command that stops the broker of ``settings`` (it is found by its state folder).

    >>> stop_command(BrokerSettings(port=9192, controller_port=9193, state_dir=Path("/b")))
    'dprobe broker stop --port 9192 --controller-port 9193 --state-dir /b'
    """
    return (
        f"dprobe broker stop --port {settings.port} --controller-port "
        f"{settings.controller_port} --state-dir {shlex.quote(str(settings.state_dir))}"
    )


def free_port(preferred: int) -> int:
    """``preferred`` when it can be bound on 127.0.0.1, else any free port. Bound as the
    metrics server binds (``SO_REUSEADDR``): a port that only closed connections still wait
    on, as after a run just before, is free."""
    for candidate in (preferred, 0):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise DprobeError("no free TCP port on 127.0.0.1")


class WorkerProcess:
    """A ``dprobe worker`` subprocess with its output in ``log``.

    Lifecycle: ``start()``; ``alive`` while it runs; ``stop()`` sends SIGTERM and, after
    ``timeout_s``, SIGKILL (idempotent). ``tail()`` gives the last lines of its log.
    """

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.cmd = [sys.executable, "-m", "dprobe.cli", *args]
        self.env = {**os.environ, **env}
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def describe_exit(self) -> str:
        """``"code 1"`` or ``"signal SIGKILL"`` (a negative return code)."""
        code = self.returncode
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return f"signal {signal.Signals(-code).name}"
        return f"code {code}"

    def tail(self, lines: int = 20) -> str:
        """The last ``lines`` non-blank lines of the log, without terminal escapes."""
        try:
            with self.log.open("r", encoding="utf-8", errors="replace") as f:
                text = [_ESCAPES.sub("", line).rstrip() for line in f]
        except OSError as exc:
            return f"(no log: {exc})"
        kept = [line for line in text if line.strip()][-lines:]
        return "\n".join(kept) if kept else "(the log is empty)"
