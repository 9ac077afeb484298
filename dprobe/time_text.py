"""Event times in logs and messages: UTC, ISO-8601 to the second, one spelling everywhere.

Example:
    >>> utc_text(1585699800.0)
    '2020-04-01T00:10:00Z'
    >>> utc_text(float("inf"))  # no calendar date holds it: said in seconds
    'inf s'
"""

from __future__ import annotations

import time


def utc_text(ts: float) -> str:
    """``ts`` (epoch seconds) as ``YYYY-MM-DDTHH:MM:SSZ``, or as ``<ts> s`` where no date
    holds it (not a number, out of the platform's range)."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    except (OverflowError, ValueError, OSError):
        return f"{ts:g} s"
