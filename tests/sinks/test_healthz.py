"""/healthz answers 503 with the reason once the process's event loop has been silent for
too long (a hung worker), which a liveness probe then restarts; 200 ``ok`` otherwise."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry

from dprobe.sinks.metrics_server import Heartbeat, MetricsServer


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_a_blocked_event_loop_makes_healthz_fail() -> None:
    beat = Heartbeat(stale_s=0.5)
    beating = asyncio.create_task(beat.run(every_s=0.05))
    with MetricsServer(CollectorRegistry(), port=0, health=beat.problem) as server:
        url = server.url.replace("/metrics", "/healthz")
        await asyncio.sleep(0.2)
        assert await asyncio.to_thread(_get, url) == (200, "ok\n")
        time.sleep(1.0)  # noqa: ASYNC251 - the loop is blocked on purpose: no beat
        status, body = _get(url)  # asked from this (blocked) thread: the server's answers
        assert status == 503 and re.search(r"event loop has not run for \d+ s", body)
        await asyncio.sleep(0.2)  # the loop runs again
        assert await asyncio.to_thread(_get, url) == (200, "ok\n")
    beating.cancel()


def test_without_a_check_healthz_says_ok() -> None:
    with MetricsServer(CollectorRegistry(), port=0) as server:
        assert _get(server.url.replace("/metrics", "/healthz")) == (200, "ok\n")


def test_the_worker_exports_how_long_its_event_loop_has_been_silent() -> None:
    # Prometheus still scrapes a hung worker (from the server thread): the gauge says it
    from dprobe.config import WorkerSettings
    from dprobe.streams.runner import _serve_metrics

    clock = [100.0]
    beat = Heartbeat(stale_s=60, clock=lambda: clock[0])
    settings = WorkerSettings(metrics_addr="127.0.0.1", metrics_port=0)
    server = _serve_metrics(settings, CollectorRegistry(), beat)
    try:
        name = "dprobe_worker_event_loop_silent_seconds"
        for now in (100.0, 175.5):
            clock[0] = now
            status, text = _get(server.url)
            lines = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
            assert status == 200 and lines == [f"{name} {now - 100.0}"], lines
    finally:
        server.stop()


def test_a_path_other_than_metrics_or_healthz_is_not_found() -> None:
    """A liveness probe or scrape pointed at a mistyped path fails at once (404 naming the
    two paths), instead of getting the metrics with 200 and never noticing a hung worker."""
    registry = CollectorRegistry()
    with MetricsServer(registry, port=0) as server:
        base = server.url.removesuffix("/metrics")
        for path in ("/health", "/healthz/", "/", "/metric", "/favicon.ico"):
            status, body = _get(base + path)
            assert status == 404, (path, status)
            assert path in body and "/metrics" in body and "/healthz" in body, body
        status, body = _get(server.url)
        assert status == 200 and body == _get(server.url + "?x=1")[1]
