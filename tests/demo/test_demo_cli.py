"""``dprobe demo`` end to end against the session broker: it finishes by itself with its
summary and a chart, and leaves no process or topic behind."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from dprobe.demo.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def _demo_topics(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return [
            t for t in await admin.list_topics() if t.startswith(("dprobe.demo-", "dprobe-demo-"))
        ]
    finally:
        await admin.close()


@pytest.mark.timeout(300)
def test_demo_runs_to_its_summary_and_writes_a_chart(kafka_bootstrap: str, tmp_path: Path) -> None:
    before = set(asyncio.run(_demo_topics(kafka_bootstrap)))
    out = tmp_path / "out"
    # the configured worker metrics port is the one the demo serves (9402 may be taken)
    port = free_port(0)
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "DPROBE_WORKER_METRICS_PORT": str(port),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "dprobe.cli", "--bootstrap", kafka_bootstrap, "demo",
         "--duration", "30", "--hosts", "4", "--tenants", "3", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    stdout = proc.stdout
    for start in (
        "summary: windows: ",
        "summary: forecasts: ",
        "summary: events: ",
        "summary: consumer lag: ",
        "summary: forecast error",
        "summary: chart ",
    ):
        assert start in stdout, stdout[-3000:]
    summary = "\n".join(line for line in stdout.splitlines() if line.startswith("summary:"))
    windows = int(stdout.split("summary: windows: ")[1].split()[0])
    assert windows >= 3 * 20, summary  # 30 s at 720x: 6 h of 10-minute windows for 3 tenants
    assert "from 3 tenants" in stdout, summary
    assert "0 lost" in stdout, summary
    # event time never passes the wall clock, so no snapshot is taken for a wrong clock
    assert "summary: dead letters: 0 records\n" in stdout, summary
    chart = out / "demo.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(chart) in stdout
    assert "worker ready" in proc.stderr
    assert f"/metrics at http://127.0.0.1:{port}/metrics" in proc.stderr, proc.stderr[-3000:]
    pid = int(proc.stderr.split("worker started (pid ")[1].split(",")[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # the worker stopped with the demo, and the run's topics are gone
    assert set(asyncio.run(_demo_topics(kafka_bootstrap))) <= before
