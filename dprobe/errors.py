"""The root exception of dprobe and the flags that say how to handle an error.

Example:
    >>> try:
    ...     raise UsageError("--speed must be > 0")
    ... except DprobeError as exc:
    ...     exc.exit_code
    2
"""

from __future__ import annotations


class DprobeError(Exception):
    """Root of every dprobe error. ``retriable``: trying again later may succeed."""

    retriable: bool = False
    exit_code: int = 1


class UsageError(DprobeError):
    """Bad usage or bad input (a CLI exits 2 with this one-line message)."""

    exit_code = 2


class MissingDependencyError(UsageError):
    """A program or package dprobe needs is not installed; the message names it."""


def reason(exc: BaseException) -> str:
    """What went wrong, for a log line: the exception's text, or its name when it has
    none (a TimeoutError, many Kafka client errors).

    >>> reason(TimeoutError()), reason(OSError("refused"))
    ('TimeoutError', 'refused')
    """
    return str(exc) or type(exc).__name__
