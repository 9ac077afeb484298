"""The demo's worker handle: exit description and a readable log tail."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dprobe.demo.processes import WorkerProcess, free_port
from dprobe.errors import DprobeError, UsageError


def test_a_failed_worker_is_described_with_its_log_tail(tmp_path: Path) -> None:
    w = WorkerProcess([], {}, tmp_path / "logs" / "worker.log")
    script = "print('\\x1b[?25hstarting'); print(); print('boom: no broker'); raise SystemExit(3)"
    w.cmd = [sys.executable, "-c", script]
    w.start()
    assert w.proc is not None
    w.proc.wait(timeout=30)
    assert w.stop() == 3  # already ended: nothing to signal
    assert not w.alive
    assert w.describe_exit() == "code 3"
    assert w.tail() == "starting\nboom: no broker"
    assert w.tail(lines=1) == "boom: no broker"


def test_a_killed_worker_names_the_signal(tmp_path: Path) -> None:
    w = WorkerProcess([], {}, tmp_path / "worker.log")
    w.cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    w.start()
    assert w.alive
    assert w.proc is not None
    w.proc.kill()
    w.proc.wait()
    assert w.describe_exit() == "signal SIGKILL"
    assert w.tail() == "(the log is empty)"


def test_stop_sends_sigterm_first(tmp_path: Path) -> None:
    w = WorkerProcess([], {}, tmp_path / "worker.log")
    w.cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    w.start()
    assert w.stop(timeout_s=10) == -15
    assert w.stop() == -15  # idempotent


def test_free_port_prefers_the_given_one() -> None:
    port = free_port(0)
    assert free_port(port) == port


def test_a_broker_is_started_only_when_nothing_answers_on_this_machine(tmp_path: Path) -> None:
    import socket

    import pytest

    from dprobe.config import BrokerSettings
    from dprobe.demo.processes import broker_to_start
    from dprobe.errors import DprobeError

    settings = BrokerSettings(port=9092, state_dir=tmp_path / "broker")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert broker_to_start(f"127.0.0.1:{port}", settings) is None
    silent = free_port(0)
    broker = broker_to_start(f"127.0.0.1:{silent}", settings)
    assert broker is not None
    assert broker.bootstrap == f"127.0.0.1:{silent}"
    assert broker.settings.state_dir == tmp_path / f"broker-{silent}"
    assert broker.settings.controller_port != silent
    with pytest.raises(DprobeError, match="no Kafka broker answers"):
        broker_to_start("kafka.invalid:9092", settings)


def test_a_port_a_closed_connection_still_waits_on_is_free() -> None:
    """The metrics server binds with SO_REUSEADDR, so a port in TIME_WAIT (a demo run just
    before) serves it: the demo keeps its documented port instead of moving to another."""
    import socket

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server side closes first: its end of the connection waits
    client.close()
    listener.close()
    assert free_port(port) == port


def test_a_port_something_listens_on_is_not_free() -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert free_port(port) != port


def test_the_stop_command_it_prints_stops_the_broker_it_started(tmp_path: Path) -> None:
    """The command printed for a broker of its own (another port, another state folder),
    parsed as the CLI parses it, names that broker, not the configured one."""
    import shlex

    from dprobe.cli import build_parser
    from dprobe.commands._common import settings
    from dprobe.config import BrokerSettings
    from dprobe.demo.processes import broker_to_start, stop_command

    configured = BrokerSettings(port=9092, state_dir=tmp_path / "my broker")
    broker = broker_to_start(f"127.0.0.1:{free_port(0)}", configured)
    assert broker is not None
    argv = shlex.split(stop_command(broker.settings))
    assert argv[:3] == ["dprobe", "broker", "stop"]
    args = build_parser().parse_args(argv[1:])
    parsed = settings(
        BrokerSettings, args, port=args.port, controller_port=args.controller_port,
        state_dir=args.state_dir,
    )  # fmt: skip
    assert (parsed.port, parsed.controller_port, parsed.state_dir) == (
        broker.settings.port, broker.settings.controller_port, broker.settings.state_dir,
    )  # fmt: skip


@contextlib.contextmanager
def _running_broker_of(state: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A process that ``state``'s pid file names, whose command line is a broker's and
    whose rendered config listens on ``port`` (where nothing listens: a broker that is
    still starting, for the broker script)."""
    state.mkdir()
    conf = state / "server.properties"
    conf.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:1\n")
    fake = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "kafka.Kafka", str(conf)]
    )
    try:
        (state / "broker.pid").write_text(f"{fake.pid}\n")
        yield fake
    finally:
        fake.kill()
        fake.wait()


def test_a_broker_of_the_state_dir_running_on_another_port_is_named_not_started(
    tmp_path: Path,
) -> None:
    """Nothing answers at the bootstrap, but the configured state dir's broker runs on
    another port: the demo says where it runs instead of starting it (which fails) and
    then stopping it at the end, a broker the demo did not start."""
    from dprobe.config import BrokerSettings
    from dprobe.demo.processes import broker_to_start

    state = tmp_path / "broker"
    elsewhere = free_port(0)
    with _running_broker_of(state, elsewhere) as fake:
        silent = free_port(0)
        settings = BrokerSettings(port=silent, state_dir=state)
        with pytest.raises(UsageError) as refused:  # exit 2: the settings disagree
            broker_to_start(f"127.0.0.1:{silent}", settings)
        message = str(refused.value)
        assert f"127.0.0.1:{elsewhere}" in message and str(state) in message
        assert fake.poll() is None  # left running


def test_a_broker_of_the_state_dir_still_starting_on_the_port_is_waited_for_by_hand(
    tmp_path: Path,
) -> None:
    """The same port spelled another way (localhost) is the same broker, still starting."""
    from dprobe.config import BrokerSettings
    from dprobe.demo.processes import broker_to_start

    state = tmp_path / "broker"
    silent = free_port(0)
    with _running_broker_of(state, silent):
        settings = BrokerSettings(port=silent, state_dir=state)
        with pytest.raises(DprobeError, match="is still starting: run the demo again"):
            broker_to_start(f"localhost:{silent}", settings)
