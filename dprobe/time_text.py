"""Event times in logs and messages: UTC, ISO-8601 to the second, one spelling everywhere.

Example:
    >>> utc_text(1585699800.0)
    '2020-04-01T00:10:00Z'
    >>> utc_text(float("inf")), utc_text(1e15)  # no date of years 1-9999 holds them
    ('inf s', '1e+15 s')
"""

from __future__ import annotations

import time


def utc_text(ts: float) -> str:
    """``ts`` (epoch seconds) as ``YYYY-MM-DDTHH:MM:SSZ``, or as ``<ts> s`` where no date
    of the years 1 to 9999 holds it (not a number, out of range)."""
    try:
        t = time.gmtime(ts)
    except (OverflowError, ValueError, OSError):
        return f"{ts:.12g} s"
    if not 1 <= t.tm_year <= 9999:
        return f"{ts:.12g} s"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", t)
