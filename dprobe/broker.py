"""Python handle on the local single-node Kafka broker managed by ``infra/kafka/kafka.sh``.

The shell script does the work (fetch jars with Maven, format once, start, readiness,
stop); this class passes the settings to it and turns its answers into Python values and
errors, so the CLI, the demo and the test fixture share one implementation.

Example:
    >>> from dprobe.config import BrokerSettings
    >>> b = LocalBroker(BrokerSettings(port=19092, controller_port=19093))
    >>> b.bootstrap
    '127.0.0.1:19092'
    >>> b.status()  # doctest: +SKIP
    'stopped'
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Literal

from dprobe.config import BrokerSettings
from dprobe.errors import DprobeError, MissingDependencyError, UsageError

BrokerState = Literal["stopped", "starting", "ready"]


def kafka_infra_dir() -> Path:
    """Folder holding kafka.sh, pom.xml and the config templates (repo or installed copy)."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "infra" / "kafka", here / "_kafka"):
        if (candidate / "kafka.sh").is_file():
            return candidate
    raise DprobeError(f"infra/kafka/kafka.sh not found next to {here}: reinstall dprobe")


class BrokerError(DprobeError):
    """The local broker failed to start or stop; the message carries its last log lines."""


class LocalBroker:
    """Start/stop/status of one local broker instance, identified by its state dir."""

    def __init__(self, settings: BrokerSettings | None = None) -> None:
        self.settings = settings or BrokerSettings()
        self.script = kafka_infra_dir() / "kafka.sh"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.settings.port}"

    def _env(self) -> dict[str, str]:
        s = self.settings
        env = dict(os.environ)
        env.update(
            DPROBE_KAFKA_PORT=str(s.port),
            DPROBE_KAFKA_CONTROLLER_PORT=str(s.controller_port),
            DPROBE_KAFKA_STATE_DIR=str(Path(s.state_dir).expanduser()),
            DPROBE_KAFKA_LIB_DIR=str(Path(s.lib_dir).expanduser()),
            DPROBE_KAFKA_HEAP=s.heap,
            # whole seconds for the script: rounded up, so 0.5 s is not 0 s
            DPROBE_KAFKA_START_TIMEOUT_S=str(math.ceil(s.start_timeout_s)),
        )
        if s.sasl_user:
            env["DPROBE_KAFKA_SASL_USER"] = s.sasl_user
            env["DPROBE_KAFKA_SASL_PASSWORD"] = s.sasl_password.get() if s.sasl_password else ""
        return env

    def _run(self, action: str) -> subprocess.CompletedProcess[str]:
        if shutil.which("bash") is None:
            raise MissingDependencyError("bash is required: install the package bash")
        return subprocess.run(
            ["bash", str(self.script), action],
            env=self._env(),
            capture_output=True,
            text=True,
            check=False,
        )

    def _raise_for(self, proc: subprocess.CompletedProcess[str], action: str) -> None:
        if proc.returncode == 0:
            return
        message = (proc.stderr.strip() or proc.stdout.strip() or f"{action} failed").splitlines()
        first = message[0].removeprefix("dprobe broker: ")
        if proc.returncode == 2:
            raise UsageError(first)
        raise BrokerError("\n".join([first, *message[1:]]))

    def fetch(self) -> None:
        """Collect the broker jars from Maven Central (no-op when cached)."""
        self._raise_for(self._run("fetch"), "fetch")

    def start(self) -> str:
        """Start (idempotent) and wait until ready; return ``"ready 127.0.0.1:PORT"``."""
        proc = self._run("start")
        self._raise_for(proc, "start")
        return proc.stdout.strip().splitlines()[-1]

    def stop(self) -> list[str]:
        """Stop the broker (SIGTERM, then SIGKILL after ``DPROBE_KAFKA_STOP_TIMEOUT_S``, 30 s
        by default); no-op when stopped. Returns what the stop has to say besides (that it
        had to send SIGKILL), one line each."""
        proc = self._run("stop")
        self._raise_for(proc, "stop")
        return [line.removeprefix("dprobe broker: ") for line in proc.stderr.splitlines()]

    def status(self) -> BrokerState:
        """``stopped`` (no live process), ``starting`` (process, not ready) or ``ready``."""
        return self.status_and_address()[0]

    def status_and_address(self) -> tuple[BrokerState, str]:
        """The state and the address of the broker of the state dir: a running one's own
        (it may have been started with another port than these settings'), else
        :attr:`bootstrap`."""
        proc = self._run("status")
        if proc.returncode == 2:  # a setting the script refuses
            self._raise_for(proc, "status")
        out = proc.stdout.split()
        state = out[0] if out else "stopped"
        if state not in ("stopped", "starting", "ready"):
            raise BrokerError(f"unexpected status output: {out!r}")
        address = out[1] if len(out) > 1 else self.bootstrap
        return state, address  # type: ignore[return-value]
