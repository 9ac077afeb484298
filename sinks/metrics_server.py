"""Serve one injected Prometheus registry on ``http://ADDR:PORT/metrics`` (a daemon thread),
and ``/healthz`` for liveness probes: ``ok`` (200) while the process serves and its
``health`` check, if any, finds nothing wrong; else 503 with the reason. Any other path
is 404, so a probe or scrape pointed at a mistyped one fails instead of passing. A
:class:`Heartbeat` is such a check: it fails when the event loop has not run for a while
(a blocked or hung loop), which a thread answering HTTP alone would never notice.

Shared by the collector (port 9401) and the stream worker (port 9402). Loopback by
default: exposing metrics beyond the host is an explicit choice (``addr="0.0.0.0"``).
``port=0`` binds an ephemeral port; :attr:`MetricsServer.port` then holds the bound one.

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> with MetricsServer(CollectorRegistry(), port=0) as server:
    ...     server.port > 0
    True
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from dprobe.errors import UsageError

log = logging.getLogger(__name__)


class _Server6(ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        return None


class Heartbeat:
    """Beats on an asyncio loop; :meth:`problem` says when it has been silent too long.

    >>> clock = [0.0]
    >>> beat = Heartbeat(stale_s=60, clock=lambda: clock[0])
    >>> beat.problem() is None
    True
    >>> clock[0] = 61.0
    >>> beat.problem()
    'the event loop has not run for 61 s (limit 60 s)'
    """

    def __init__(self, stale_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        if not stale_s > 0:
            raise ValueError("stale_s must be > 0")
        self.stale_s = stale_s
        self.clock = clock
        self.at = clock()

    async def run(self, every_s: float = 1.0) -> None:
        """Beat every ``every_s`` seconds until cancelled."""
        while True:
            self.at = self.clock()
            await asyncio.sleep(every_s)

    def silent_s(self) -> float:
        """Seconds since the loop last beat (0 to about ``every_s`` while it runs)."""
        return self.clock() - self.at

    def problem(self) -> str | None:
        """None while the loop beats; else why the process is not healthy."""
        silent = self.silent_s()
        if silent <= self.stale_s:
            return None
        return f"the event loop has not run for {silent:.0f} s (limit {self.stale_s:g} s)"


class MetricsServer:
    """Serves ``registry`` on ``http://addr:port/metrics`` from a daemon thread.

    ``start()`` raises ``OSError`` when the address cannot be bound; ``stop()`` is
    idempotent. Scrapes run in the server thread and only read in-memory state.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        addr: str = "127.0.0.1",
        port: int = 9401,
        *,
        health: Callable[[], str | None] | None = None,
    ) -> None:
        self.registry = registry
        self.health = health
        self.addr = addr
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The scrape URL (with the bound port once started)."""
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> int:
        """Bind and serve; return the bound port (useful with ``port=0``)."""
        if self._server is not None:
            return self.port
        app = make_wsgi_app(self.registry)

        def serve(environ: dict[str, Any], start_response: Any) -> Any:
            path = str(environ.get("PATH_INFO") or "/")
            if path == "/healthz":  # liveness, not the metrics
                problem = self.health() if self.health is not None else None
                status = "200 OK" if problem is None else "503 Service Unavailable"
                start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
                return [f"{problem or 'ok'}\n".encode()]
            if path != "/metrics":  # a mistyped probe or scrape fails instead of passing
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [f"not found: {path} (this server answers /metrics and /healthz)\n".encode()]
            return app(environ, start_response)

        server_class = _Server6 if ":" in self.addr else ThreadingWSGIServer
        server = make_server(self.addr, self.port, serve, server_class, handler_class=_QuietHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True, name="metrics")
        thread.start()
        self._server, self._thread = server, thread
        self.port = int(server.server_port)
        log.info("metrics on %s", self.url)
        return self.port

    def serve(self) -> int:
        """:meth:`start` for a command: an address that cannot be bound (a busy port) is
        one :class:`~dprobe.errors.UsageError` line (exit 2)."""
        try:
            return self.start()
        except OSError as exc:
            hint = ""
            if exc.errno == errno.EADDRINUSE:
                hint = (
                    " (another service serves there: give this one its own port with "
                    "--metrics-port, 0 for any free port, which its log names)"
                )
            raise UsageError(
                f"cannot serve /metrics on {self.addr}:{self.port}: {exc}{hint}"
            ) from None

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
