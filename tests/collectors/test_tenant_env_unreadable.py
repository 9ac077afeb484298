"""``tenant_env_vars`` on a collector that may not read other users' environments (no
CAP_SYS_PTRACE, as the shipped unit runs) says so once, instead of attributing those
processes without their environment in silence."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from dprobe.collectors.tenants import TenantResolver
from tests.as_nobody import run_as_nobody


def _warnings_resolving_as_nobody(pids: list[int]) -> list[str]:
    """The warnings a resolver logs while resolving ``pids``, run as an unprivileged user."""

    def body() -> str:
        got: list[str] = []

        class _Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                got.append(record.getMessage())

        logging.getLogger("dprobe.collectors.tenants").addHandler(_Keep(logging.WARNING))
        resolver = TenantResolver("/proc", env_vars=["PATH"], pod_log_dir=None)
        try:
            for p in pids:
                resolver.resolve(p)
        except Exception as exc:  # reported to the parent, which fails on it
            got.append(f"resolve failed: {exc!r}")
        return "\n".join(got)

    return run_as_nobody(body).splitlines()


def test_an_environment_the_collector_may_not_read_is_said_once() -> None:
    if os.geteuid() != 0 and Path("/proc/1").stat().st_uid == os.geteuid():
        pytest.skip("no process of another user to read here")
    # this process (root) and pid 1: neither's environment is readable by nobody
    others = [os.getpid(), 1] if os.geteuid() == 0 else [1, 1]
    TenantResolver("/proc", env_vars=["PATH"], pod_log_dir=None).resolve(others[0])  # imports
    warnings = _warnings_resolving_as_nobody(others)
    assert len(warnings) == 1, warnings
    assert f"process {others[0]}" in warnings[0]
    assert "tenant_env_vars" in warnings[0] and "CAP_SYS_PTRACE" in warnings[0]
