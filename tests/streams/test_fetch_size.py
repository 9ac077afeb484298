"""The worker's per-partition fetch size and session timeout reach faust's consumer (no broker).

With faust's default of 1 MiB per partition a worker catching up waits for its next
fetch most of the time (docs/worker.md, "Throughput"); ``fetch_partition_bytes`` sets it.
"""

from __future__ import annotations

from pathlib import Path

from dprobe.config import WorkerSettings
from tests.streams.helpers import unstarted_worker_app


def test_the_fetch_size_is_the_settings(tmp_path: Path) -> None:
    for size in (WorkerSettings().fetch_partition_bytes, 3 * 1024 * 1024):
        with unstarted_worker_app(
            WorkerSettings(data_dir=tmp_path, fetch_partition_bytes=size)
        ) as built:
            assert built.app.conf.consumer_max_fetch_size == size
    assert WorkerSettings().fetch_partition_bytes > 1024 * 1024  # above faust's default


def test_the_session_timeout_reaches_the_group_with_a_heartbeat_well_within_it(
    tmp_path: Path,
) -> None:
    for timeout, beat in ((60.0, 3.0), (6.0, 2.0)):
        with unstarted_worker_app(
            WorkerSettings(data_dir=tmp_path, session_timeout_s=timeout)
        ) as built:
            assert built.app.conf.broker_session_timeout == timeout
            assert built.app.conf.broker_heartbeat_interval == beat
