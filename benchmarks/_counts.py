"""The benchmarks' check of their count flags (``--runs``, ``--ticks``, ...): a count
that leaves nothing to measure is refused before any work starts, in one line on stderr,
exit 2, as argparse refuses what it cannot parse."""

from __future__ import annotations

import argparse


def at_least(
    parser: argparse.ArgumentParser, args: argparse.Namespace, *flags: str, least: int = 1
) -> None:
    """Exit 2 with ``PROG: FLAG must be >= LEAST, got VALUE`` for the first of ``flags``
    (long options, e.g. ``"--procs-per-gpu"``) whose parsed value is below ``least``."""
    for flag in flags:
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value < least:
            parser.exit(2, f"{parser.prog}: {flag} must be >= {least}, got {value}\n")
