"""Run a piece of a test as an unprivileged user (nobody), as a service's dynamic user
runs, and read back what it reports.

>>> run_as_nobody(lambda: "ok")
'ok'
"""

from __future__ import annotations

import os
from collections.abc import Callable

NOBODY = 65534


def run_as_nobody(body: Callable[[], str]) -> str:
    """``body()`` in a forked child that drops to user and group nobody when run as root;
    its text, or ``Type: message`` of what it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            if os.geteuid() == 0:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            try:
                result = body()
            except BaseException as exc:
                result = f"{type(exc).__name__}: {exc}"
            os.write(write, result.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        out = pipe.read().decode()
    os.waitpid(pid, 0)
    return out
