"""A Kafka address that accepts connections but never answers (a hung broker): the
collector's warning says how long it waited, not a bare ``TimeoutError``, and counts one
snapshot in the singular."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dprobe.collectors.metrics import CollectorMetrics
from dprobe.collectors.sender import KafkaSender
from dprobe.collectors.spool import Spool
from dprobe.config import KafkaSettings


async def test_a_connect_that_gets_no_answer_says_how_long_it_waited(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as silent:  # the kernel accepts connections; nothing answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        spool = Spool(tmp_path, max_bytes=1 << 20, fsync=False)
        spool.open()
        spool.append(0, b"0")
        sender = KafkaSender(
            KafkaSettings(bootstrap=f"127.0.0.1:{port}", request_timeout_ms=60_000),
            "hung.samples",
            key=b"h1",
            spool=spool,
            metrics=CollectorMetrics(CollectorRegistry()),
            send_timeout_s=1.0,
        )
        with caplog.at_level(logging.WARNING, logger="dprobe.collectors.sender"):
            await sender.start()
            for _ in range(100):
                if caplog.records:
                    break
                await asyncio.sleep(0.05)
            await sender.stop(timeout_s=0)
        spool.close()
    said = [r.getMessage() for r in caplog.records if r.name == "dprobe.collectors.sender"]
    assert said == [
        f"Kafka at 127.0.0.1:{port} not reachable (no answer within 1 s): spooling "
        "(1 snapshot spooled)",
        "1 snapshot left in the spool for the next run",
    ]
