"""`dprobe broker`: idempotent start, truthful status in all three states, clean stop."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dprobe.broker import LocalBroker
from dprobe.config import BrokerSettings
from tests.conftest import _free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _java_pids(state_dir: Path) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-f", f"kafka.Kafka {state_dir}"], capture_output=True, text=True, check=False
    )
    return [int(p) for p in out.stdout.split()]


def _ended(pid: int) -> bool:
    """The process has exited: gone, or a zombie its parent has not reaped yet (the stop
    waits for the exit, not for whoever reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _cli(
    state_dir: Path, port: int, cport: int, action: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dprobe.cli",
            "broker",
            action,
            "--port",
            str(port),
            "--controller-port",
            str(cport),
            "--state-dir",
            str(state_dir),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_broker_lifecycle_and_status(tmp_path: Path) -> None:
    port, cport = _free_port(), _free_port()
    state = tmp_path / "broker"
    broker = LocalBroker(BrokerSettings(port=port, controller_port=cport, state_dir=state))
    assert broker.status() == "stopped"
    assert _cli(state, port, cport, "status").returncode == 1

    try:
        seen: list[str] = []
        starter = threading.Thread(target=broker.start)
        starter.start()
        while starter.is_alive():
            seen.append(broker.status())
            time.sleep(0.05)
        starter.join()
        assert "starting" in seen, seen
        assert broker.status() == "ready"
        res = _cli(state, port, cport, "status")
        assert (res.returncode, res.stdout.split()[0]) == (0, "ready")
        pids = _java_pids(state)
        assert len(pids) == 1

        # A second start is harmless: same process, still ready.
        res = _cli(state, port, cport, "start")
        assert res.returncode == 0, res.stderr
        assert _java_pids(state) == pids

        # Asked about another port, status tells the running broker's own address, and start
        # refuses at once instead of waiting for a broker on a port nothing listens on.
        other = _free_port()
        res = _cli(state, other, cport, "status")
        assert (res.returncode, res.stdout.split()) == (0, ["ready", f"127.0.0.1:{port}"])
        assert f"listens on 127.0.0.1:{port}, not 127.0.0.1:{other}" in res.stderr
        # Asked about an address (--bootstrap), the note speaks of that address: none
        # where the broker listens there, whatever --port says, one naming it elsewhere.
        res = _cli(state, other, cport, "status", "--bootstrap", f"localhost:{port}")
        assert (res.returncode, res.stdout.split()[0], res.stderr) == (0, "ready", "")
        res = _cli(state, port, cport, "status", "--bootstrap", f"127.0.0.1:{other}")
        assert res.returncode == 0
        assert f"listens on 127.0.0.1:{port}, not on 127.0.0.1:{other} (--bootstrap)" in res.stderr
        res = _cli(state, other, cport, "start")
        assert res.returncode == 2, res.stderr
        assert f"already running on port {port}" in res.stderr
        assert _java_pids(state) == pids

        # A stale pid file (a pid that is not our broker) does not confuse start/status.
        res = _cli(state, port, cport, "stop")
        assert res.returncode == 0 and _java_pids(state) == []
        (state / "broker.pid").write_text("999999\n")
        assert broker.status() == "stopped"
        assert broker.start().startswith("ready")
        assert len(_java_pids(state)) == 1
        broker.stop()
        assert _java_pids(state) == [] and broker.status() == "stopped"
    finally:  # a failed assertion leaves no broker running
        broker.stop()


def test_a_state_dir_whose_name_holds_pattern_characters_is_its_brokers(tmp_path: Path) -> None:
    """The broker's command line is matched as text: a state dir such as ``broker[1]``
    (a pattern to grep) is still recognised, so start sees it ready and stop stops it; and
    its name goes into the broker's config as it is (``&`` and ``|`` mean nothing to sed,
    a backslash is escaped for the properties file): the broker keeps its data there."""
    port, cport = _free_port(), _free_port()
    state = tmp_path / "broker[1]&|\\b"
    broker = LocalBroker(BrokerSettings(port=port, controller_port=cport, state_dir=state))
    try:
        res = _cli(state, port, cport, "start")
        assert res.returncode == 0, res.stderr
        pid = int((state / "broker.pid").read_text())
        assert broker.status() == "ready"
        config = (state / "server.properties").read_text().splitlines()
        data = str(state / "data")
        assert f"log.dirs={data.replace(chr(92), chr(92) * 2)}" in config
        assert (state / "data" / "meta.properties").is_file()  # formatted where it was told
    finally:
        broker.stop()
    assert _ended(pid) and broker.status() == "stopped"


def test_a_broker_whose_pid_file_is_gone_is_still_found_and_stopped(tmp_path: Path) -> None:
    """A start killed after the broker was launched but before it wrote its pid file
    (a demo or a service manager stopping it then) leaves a broker without one: status
    still sees it, and stop stops it, instead of leaving it running unseen."""
    port, cport = _free_port(), _free_port()
    state = tmp_path / "broker"
    broker = LocalBroker(BrokerSettings(port=port, controller_port=cport, state_dir=state))
    try:
        broker.start()
        pid = int((state / "broker.pid").read_text())
        (state / "broker.pid").unlink()
        assert broker.status() == "ready"
        assert int((state / "broker.pid").read_text()) == pid  # written again
        (state / "broker.pid").unlink()
        assert broker.stop() == []
        assert _ended(pid) and broker.status() == "stopped"
        assert _java_pids(state) == []
    finally:
        broker.stop()


def test_a_start_timeout_below_a_whole_second_is_rounded_up_not_to_zero() -> None:
    # kafka.sh counts whole seconds: 0.5 s must not become 0 s, a start that cannot succeed
    env = LocalBroker(BrokerSettings(start_timeout_s=0.5))._env()
    assert env["DPROBE_KAFKA_START_TIMEOUT_S"] == "1"
    assert (
        LocalBroker(BrokerSettings(start_timeout_s=120))._env()["DPROBE_KAFKA_START_TIMEOUT_S"]
        == "120"
    )


def test_a_state_dir_that_cannot_be_made_gives_one_clear_line() -> None:
    state = Path("/proc/dprobe-no-such-dir/broker")  # under a folder nobody may write to
    res = _cli(state, _free_port(), _free_port(), "start")
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"cannot create the state dir {state}" in res.stderr


def test_a_jar_cache_that_cannot_be_made_gives_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = "/proc/dprobe-no-such-dir/kafka-lib"
    monkeypatch.setenv("DPROBE_BROKER_LIB_DIR", lib)
    res = _cli(tmp_path / "broker", _free_port(), _free_port(), "start")
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"cannot create the jar cache {lib}" in res.stderr


def _path_without(tmp_path: Path, *missing: str) -> str:
    """A PATH holding every program of /usr/bin and /bin except ``missing``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in (Path("/usr/bin"), Path("/bin")):
        for prog in d.iterdir():
            link = bin_dir / prog.name
            if prog.name not in missing and not link.exists():
                link.symlink_to(prog)
    return str(bin_dir)


@pytest.mark.parametrize(
    ("missing", "package"),
    [
        (("java", "mvn"), "openjdk-17-jre-headless"),
        (("mvn",), "maven"),
    ],
)
def test_missing_java_or_maven_gives_one_clear_line(
    tmp_path: Path, missing: tuple[str, ...], package: str
) -> None:
    env = {
        "PATH": _path_without(tmp_path, *missing),
        "HOME": str(tmp_path),
        "DPROBE_KAFKA_LIB_DIR": str(tmp_path / "lib"),
        "DPROBE_KAFKA_STATE_DIR": str(tmp_path / "state"),
        "DPROBE_KAFKA_PORT": str(_free_port()),
    }
    res = subprocess.run(
        ["bash", str(LocalBroker().script), "start"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"install the package {package}" in res.stderr


_DEAF = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(1, flush=True); time.sleep(120)"
)


def test_a_broker_that_ignores_sigterm_is_killed_and_the_stop_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker still running after the SIGTERM wait is sent SIGKILL, and `dprobe broker
    stop` says so on stderr (a killed broker recovers its logs at the next start, which
    takes longer). The stop does not wait for the killed process to be reaped: here it is
    this test's child, a zombie until the test waits for it."""
    state = tmp_path / "broker"
    state.mkdir()
    # a process this state dir's stop takes for its broker (by its command line), deaf
    # to SIGTERM as a broker stuck in a long flush would be
    deaf = subprocess.Popen(
        [sys.executable, "-c", _DEAF, "kafka.Kafka", str(state / "server.properties")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert deaf.stdout is not None and deaf.stdout.readline().strip() == "1"
        (state / "broker.pid").write_text(f"{deaf.pid}\n")
        monkeypatch.setenv("DPROBE_KAFKA_STOP_TIMEOUT_S", "1")
        res = _cli(state, _free_port(), _free_port(), "stop")
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "stopped"
        assert res.stderr.strip() == (
            "dprobe broker: no exit after 1s of SIGTERM, sending SIGKILL"
        ), res.stderr
        assert deaf.wait(timeout=10) == -9
        assert not (state / "broker.pid").exists()
    finally:
        deaf.kill()
        deaf.wait()
        if deaf.stdout is not None:
            deaf.stdout.close()


@pytest.mark.parametrize("action", ["start", "stop", "status"])
@pytest.mark.parametrize("value", ["0.5", "08", "-1", "30s"])
def test_a_stop_timeout_that_is_not_whole_seconds_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action: str, value: str
) -> None:
    """Refused by every action, so a demo is not run to its end before its broker's stop
    refuses it; "08" would be read as octal by the script's arithmetic."""
    monkeypatch.setenv("DPROBE_KAFKA_STOP_TIMEOUT_S", value)
    res = _cli(tmp_path, _free_port(), _free_port(), action)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == (
        f"dprobe broker: DPROBE_KAFKA_STOP_TIMEOUT_S must be whole seconds, not '{value}'"
    )
    assert not (tmp_path / "broker.pid").exists()
