"""Against a SASL (SCRAM-SHA-512) broker, a wrong password makes every command say so in
one line with exit 2, and the collector, which spools on, says so in its log and on its
/metrics (``dprobe_collector_kafka_auth_failed``)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dprobe.config import KafkaSettings, Secret
from tests.streams.helpers import kafka_env

pytestmark = pytest.mark.integration


def _wrong(k: KafkaSettings) -> KafkaSettings:
    return dataclasses.replace(k, sasl_password=Secret("not-the-password"))


def _run(
    argv: list[str], broker: KafkaSettings, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **kafka_env(broker), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "dprobe.cli", *argv],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_command_says_the_credentials_were_refused(
    sasl_kafka: KafkaSettings, tmp_path: Path
) -> None:
    trace = tmp_path / "d.csv"
    trace.write_text("ts,tenant,demand_gpus\n60,vc-a,1\n120,vc-a,2\n")
    wrong = _wrong(sasl_kafka)
    commands = {
        "worker": [
            "worker",
            "--data-dir",
            str(tmp_path / "w"),
            "--app-id",
            "auth-test",
            "--metrics-port",
            "0",  # 9402 may serve another worker on this machine
        ],
        "archive": ["archive", "--out", str(tmp_path / "a")],
        "replay": ["replay", "--format", "demand-csv", "--no-progress", str(trace)],
        "events": ["events", "--max-events", "1"],
        "lag": ["lag", "--metrics-port", "0"],
        "topics": ["topics", "list"],
        "cluster": ["cluster", "show"],
    }
    for name, argv in commands.items():
        run = _run(argv, wrong, tmp_path)
        lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else ""
        assert run.returncode == 2, (name, run.stderr[-2000:])
        assert "refused the credentials of user 'dprobe'" in last, (name, run.stderr[-2000:])
        assert "Traceback" not in run.stderr, name
        assert "not-the-password" not in run.stderr, name


def test_the_collector_spools_and_says_the_credentials_were_refused(
    sasl_kafka: KafkaSettings, tmp_path: Path
) -> None:
    argv = ["--log-level", "WARNING", "collect", "--backend", "synthetic", "--interval", "0.2"]
    argv += ["--max-ticks", "5", "--spool-dir", str(tmp_path / "spool")]
    argv += ["--state-dir", str(tmp_path / "state"), "--metrics-port", "0"]
    run = _run(argv, _wrong(sasl_kafka), tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "refused the credentials of user 'dprobe'" in run.stderr
    assert "not-the-password" not in run.stderr


async def test_the_collector_exports_the_refusal_and_clears_it(
    sasl_kafka: KafkaSettings, tmp_path: Path
) -> None:
    from prometheus_client import CollectorRegistry

    from dprobe.collectors.metrics import CollectorMetrics
    from dprobe.collectors.sender import KafkaSender
    from dprobe.collectors.spool import Spool

    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    gauge = "dprobe_collector_kafka_auth_failed"
    spool = Spool(tmp_path / "spool", fsync=False)
    for kafka, expected in ((_wrong(sasl_kafka), 1.0), (sasl_kafka, 0.0)):
        sender = KafkaSender(kafka, "auth-test", key=b"h", spool=spool, metrics=metrics)
        connected = await sender._connect()
        assert connected is (expected == 0.0)
        assert registry.get_sample_value(gauge) == expected
        await sender._close_producer()
    assert registry.get_sample_value("dprobe_collector_send_errors_total", {"kind": "auth"}) == 1
