"""Two workers on one host must not share a state folder (``data_dir``): a worker is
known to the others of its group by its host and state folder (the marks of its window
settings), and the folder holds its local state. A second worker started on a folder in
use exits 2 before it joins anything, naming the folder and the worker that holds it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.streams.helpers import worker_process

_HOLD = """
import sys, time
from dprobe.config import WorkerSettings
from dprobe.streams.runner import lock_data_dir
lock = lock_data_dir(WorkerSettings(data_dir=sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def _holder(data_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that holds ``data_dir``'s lock as a worker does, killed at the end."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(data_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _worker(bootstrap: str, app_id: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DPROBE_WORKER_METRICS_PORT": "0",
        "DPROBE_KAFKA_TOPIC_PREFIX": f"{app_id}.",
    }
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", bootstrap, "worker"]
    return subprocess.run(
        [*cmd, "--app-id", app_id, "--window", "10", "--grace", "2", "--data-dir", str(data_dir)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_second_worker_on_a_state_folder_in_use_exits_2_naming_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    name = f"lock-{uuid.uuid4().hex[:8]}"
    with worker_process(
        kafka_bootstrap, prefix=f"{name}.", app_id=name, data_dir=tmp_path, log=tmp_path / "w.log"
    ) as first:
        deadline = time.monotonic() + 30  # it holds the folder from its start on
        lock = tmp_path / "worker.lock"
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
            if time.monotonic() > deadline:
                break
            assert first.poll() is None
            time.sleep(0.2)
        done = _worker(kafka_bootstrap, name, tmp_path)  # the same folder, on the same host
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert str(tmp_path) in last and f"pid {first.pid}" in last
        assert "--data-dir" in last
        assert first.poll() is None  # the first runs on


def test_a_state_folder_is_free_again_once_its_worker_is_gone(tmp_path: Path) -> None:
    with _holder(tmp_path):
        pass  # killed on leaving: the lock goes with the process
    with _holder(tmp_path):
        pass
