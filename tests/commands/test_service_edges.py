"""Operations rough edges: /healthz answers health (not the metrics), a busy or out of
range metrics port is one line and exit 2 for every service, and scaling events carry
every documented field on the wire."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import msgspec
import pytest
from prometheus_client import CollectorRegistry, Counter

from dprobe.schema import Forecast, ModelInfo, ScalingEvent, encode
from dprobe.sinks.metrics_server import MetricsServer


def test_healthz_answers_health_and_metrics_stay_on_metrics() -> None:
    registry = CollectorRegistry()
    Counter("dprobe_test_things", "things", registry=registry).inc()
    with MetricsServer(registry, port=0) as server:
        health = urllib.request.urlopen(server.url.replace("/metrics", "/healthz"), timeout=5)
        metrics = urllib.request.urlopen(server.url, timeout=5).read().decode()
    assert health.status == 200 and health.read() == b"ok\n"
    assert "dprobe_test_things_total 1.0" in metrics


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--metrics-port"],
        ["lag", "--metrics-port"],
        ["collect", "--backend", "synthetic", "--no-send", "--metrics-port"],
    ],
)
def test_a_busy_metrics_port_is_one_line_and_exit_2(argv: list[str], busy_port: int) -> None:
    cmd = [sys.executable, "-m", "dprobe.cli", "--bootstrap", "127.0.0.1:1", *argv]
    done = subprocess.run(
        [*cmd, str(busy_port)], capture_output=True, text=True, timeout=120, check=False
    )
    lines = [line for line in done.stderr.splitlines() if "cannot serve /metrics" in line]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "give this one its own port with --metrics-port" in lines[0]


@pytest.mark.parametrize(
    ("argv", "setting"),
    [
        (["worker", "--metrics-port", "-1"], "worker.metrics_port"),
        (["worker", "--metrics-port", "65536"], "worker.metrics_port"),
        (["lag", "--metrics-port", "70000"], "lag.metrics_port"),
        (["collect", "--no-send", "--metrics-port", "70000"], "collector.metrics_port"),
        (["collect", "--no-send", "--metrics-port", "-1"], "collector.metrics_port"),
    ],
)
def test_a_metrics_port_out_of_range_is_one_line_and_exit_2(
    argv: list[str], setting: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from dprobe.cli import main

    assert main(["--bootstrap", "127.0.0.1:1", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    given = f"(given: --metrics-port {argv[-1]})"
    assert err == [f"dprobe {argv[0]}: {setting} must be within [0, 65535] {given}"]


def test_a_scaling_event_carries_its_documented_defaults_on_the_wire() -> None:
    ev = ScalingEvent(
        event_id="e", plan_id="p", ts=1.0, time="", tenant="vc-a", action="scale_up",
        current_quota_gpus=8, target_quota_gpus=16, delta_gpus=8, reason="r", message="",
        forecast=Forecast(horizon_s=600, p50=1, p90=2), model=ModelInfo(name="m", version="1"),
    )  # fmt: skip
    wire = msgspec.json.decode(encode(ev))
    for name in ("type", "source", "resource", "plan_seq", "plan_size", "guaranteed_gpus"):
        assert name in wire, name
    assert wire["resource"] == "nvidia.com/gpu"
