"""A count and its noun as a line shows it: ``1 record``, ``2,500 records``.

Example:
    >>> count_of(1, "VC"), count_of(10, "VC"), count_of(506316, "window")
    ('1 VC', '10 VCs', '506,316 windows')
"""

from __future__ import annotations


def count_of(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural (``noun`` + ``s``) unless ``n`` is 1."""
    return f"{n} {noun}" if n == 1 else f"{n:,} {noun}s"
