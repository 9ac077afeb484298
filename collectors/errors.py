"""Errors of the collectors, each saying whether trying again may help.

Example:
    >>> err = BackendError("NVML call timed out", kind="timeout", retriable=True)
    >>> err.kind, err.retriable
    ('timeout', True)
"""

from __future__ import annotations

from dprobe.errors import DprobeError


class CollectorError(DprobeError):
    """Root of every collector error."""


class BackendError(CollectorError):
    """A GPU backend failed to read (all of a host, or one device).

    ``kind`` is a short, bounded code used as a metric label (``timeout``, ``gpu_lost``,
    ``no_driver``, ...). ``retriable`` says whether the next tick may succeed; a fatal
    error on one device (``gpu_lost``) drops that device, a fatal error of the whole
    backend (``no_driver``) makes the collector reopen the backend after a backoff.
    ``device`` names the GPU (UUID or index) when the error concerns one device only.
    """

    def __init__(
        self, message: str, *, kind: str, retriable: bool, device: str | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retriable = retriable
        self.device = device


class ProcessGone(CollectorError):
    """A process ended between being listed by the backend and being attributed."""

    retriable = True
