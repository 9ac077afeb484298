"""A worker says once, at start, where its /metrics is served: the scrape URL with the
bound port (port 0 picks a free one, which only the log tells), written so that it can
be pasted (an IPv6 address in brackets)."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from dprobe.config import WorkerSettings
from dprobe.errors import UsageError
from dprobe.sinks.metrics_server import Heartbeat
from dprobe.streams.runner import _serve_metrics


@pytest.mark.parametrize("addr, host", [("127.0.0.1", "127.0.0.1"), ("::1", "[::1]")])
def test_the_scrape_url_is_logged_once(
    addr: str, host: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = WorkerSettings(metrics_addr=addr, metrics_port=0)
    with caplog.at_level(logging.INFO, logger="dprobe"):
        try:
            server = _serve_metrics(settings, CollectorRegistry(), Heartbeat())
        except UsageError as exc:  # a host without IPv6 on loopback
            if addr == "::1":
                pytest.skip(f"no IPv6 loopback here: {exc}")
            raise
    try:
        assert server.port > 0
        lines = [r.getMessage() for r in caplog.records if "/metrics" in r.getMessage()]
        assert len(lines) == 1, lines
        assert f"http://{host}:{server.port}/metrics" in lines[0]
    finally:
        server.stop()
