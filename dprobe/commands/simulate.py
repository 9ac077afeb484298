"""Not available in this version yet."""

from __future__ import annotations

import argparse

from dprobe.commands._common import not_built


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    return not_built("simulate")
