"""``tenant_env_vars`` on a collector that may not read other users' environments (no
CAP_SYS_PTRACE, as the shipped unit runs) says so once, instead of attributing those
processes without their environment in silence."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from dprobe.collectors.tenants import TenantResolver

NOBODY = 65534


def _warnings_resolving_as_nobody(pids: list[int]) -> list[str]:
    """The warnings a resolver logs while resolving ``pids``, run as an unprivileged user."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            got: list[str] = []

            class _Keep(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    got.append(record.getMessage())

            logger = logging.getLogger("dprobe.collectors.tenants")
            logger.addHandler(_Keep(logging.WARNING))
            if os.geteuid() == 0:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            resolver = TenantResolver("/proc", env_vars=["PATH"], pod_log_dir=None)
            try:
                for p in pids:
                    resolver.resolve(p)
            except Exception as exc:  # reported to the parent, which fails on it
                got.append(f"resolve failed: {exc!r}")
            os.write(write, "\n".join(got).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        out = pipe.read().decode()
    os.waitpid(pid, 0)
    return out.splitlines()


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
