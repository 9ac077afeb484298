"""A worker asked to stop is gone within its deadline: a real ``mode.Worker`` (what
``faust.Worker`` is) in its own process, a service whose stop never ends, real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = """
import asyncio, os, signal, sys
import mode
from dprobe.streams.shutdown_deadline import ShutdownDeadline

class Service(mode.Service):
    async def on_started(self) -> None:
        print("started", flush=True)
        if sys.argv[1] == "twice":  # one SIGTERM delivered twice, as timeout(1) does
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)

    async def on_stop(self) -> None:
        if sys.argv[1] == "thread":  # faust's consumer thread, ended by a broker that is away
            import threading

            def consumer() -> None:
                raise asyncio.CancelledError()

            threading.Thread(target=consumer, name="Thread-2").start()
        if sys.argv[1] in ("hang", "thread"):  # a stop waiting on an unreachable broker
            await asyncio.sleep(3600)

class Worker(ShutdownDeadline, mode.Worker):
    pass

Worker(Service(), shutdown_timeout_s=float(sys.argv[2]), loglevel="INFO", quiet=True,
       override_logging=False, redirect_stdouts=False).execute_from_commandline()
"""


def _started(tmp_path: Path, how: str, deadline_s: float) -> subprocess.Popen[str]:
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), how, str(deadline_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    return proc


def _exit(proc: subprocess.Popen[str], within_s: float) -> tuple[int, str, float]:
    """(exit code, what it wrote, seconds) of a process asked to stop just now."""
    began = time.monotonic()
    out, _ = proc.communicate(timeout=within_s)
    return proc.returncode, out, time.monotonic() - began


def test_a_stop_that_hangs_ends_at_the_deadline_with_exit_1(tmp_path: Path) -> None:
    proc = _started(tmp_path, "hang", 2.0)
    proc.send_signal(signal.SIGTERM)
    code, out, took = _exit(proc, within_s=60)
    assert code == 1
    assert "still stopping 2 s after SIGTERM (a Kafka broker that does not answer, or a " in out
    assert "exiting now" in out
    assert took >= 2.0


def test_a_second_signal_ends_it_at_once(tmp_path: Path) -> None:
    proc = _started(tmp_path, "hang", 120.0)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    code, out, _ = _exit(proc, within_s=60)  # well before the 120-s deadline
    assert code == 1
    assert "SIGINT received again while stopping" in out


def test_one_signal_delivered_twice_is_one_clean_stop(tmp_path: Path) -> None:
    """``timeout 60 dprobe worker`` signals the worker, then its process group: the two
    SIGTERMs are one request to stop, not a second signal that ends it at once."""
    proc = _started(tmp_path, "twice", 120.0)
    code, out, _ = _exit(proc, within_s=60)
    assert code == 0, out
    assert "received again" not in out and "exiting now" not in out


def test_a_worker_that_stops_in_time_exits_0_without_waiting_for_the_deadline(
    tmp_path: Path,
) -> None:
    proc = _started(tmp_path, "quick", 120.0)
    proc.send_signal(signal.SIGTERM)
    code, out, _ = _exit(proc, within_s=60)  # the armed timer does not hold the exit
    assert code == 0
    assert "exiting now" not in out


def test_the_deadline_must_be_positive_and_at_most_an_hour() -> None:
    import mode

    from dprobe.streams.shutdown_deadline import ShutdownDeadline

    class Worker(ShutdownDeadline, mode.Worker):
        pass

    for wrong in (0, -1, 1e12):
        with pytest.raises(ValueError, match=r"shutdown_timeout_s must be within \(0, 3600\]"):
            Worker(shutdown_timeout_s=wrong)
    from dprobe.config import ConfigError, WorkerSettings

    with pytest.raises(ConfigError, match="shutdown_timeout_s"):
        WorkerSettings(shutdown_timeout_s=1e12)


def test_a_thread_that_ends_while_stopping_says_so_in_one_line(tmp_path: Path) -> None:
    proc = _started(tmp_path, "thread", deadline_s=3.0)
    proc.send_signal(signal.SIGTERM)
    code, out, _ = _exit(proc, within_s=30)
    assert code == 1, out
    assert "Thread-2 ended while the worker stopped: CancelledError" in out
    assert "Traceback" not in out and "Exception in thread" not in out
