"""Helpers shared by the sub-commands: settings loading."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any, TypeVar

from dprobe.config import load
from dprobe.errors import UsageError

S = TypeVar("S")


def settings(cls: type[S], args: argparse.Namespace, **cli: Any) -> S:
    """Build ``cls`` from the parsed ``args`` (global ``--bootstrap``/``--config``) and ``cli``.

    >>> import argparse
    >>> from dprobe.config import WorkerSettings
    >>> ns = argparse.Namespace(bootstrap="h:1", config=None)
    >>> settings(WorkerSettings, ns, window_s=5).kafka.bootstrap
    'h:1'
    """
    config = getattr(args, "config", None) or os.environ.get("DPROBE_CONFIG")
    values = {"bootstrap": getattr(args, "bootstrap", None), **cli}
    return load(cls, cli=values, file=config, flags=getattr(args, "_flags", None))


def positive(value: float, flag: str) -> float:
    """``value`` when it is a finite number > 0; a :class:`UsageError` naming ``flag``
    otherwise (NaN and infinity pass a plain ``> 0`` test, or fail it with a puzzling
    message later).

    >>> positive(600.0, "--window-s")
    600.0
    >>> positive(float("nan"), "--window-s")
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: --window-s must be a finite number > 0, got nan
    """
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag} must be a finite number > 0, got {value:g}")
    return value


MAX_SEED = 2**32 - 1  # what numpy's and torch's generators both take


def checked_seed(value: int, flag: str) -> int:
    """``value`` when the random generators take it as a seed; a :class:`UsageError`
    naming ``flag`` otherwise.

    >>> checked_seed(3, "--seed")
    3
    >>> checked_seed(-1, "--seed")
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: --seed must be within 0 .. 4294967295, got -1
    """
    if not 0 <= value <= MAX_SEED:
        raise UsageError(f"{flag} must be within 0 .. {MAX_SEED}, got {value}")
    return value


def nonempty_path(text: str) -> str:
    """A path flag's value (an argparse ``type``); an empty one (an unset shell variable,
    say) is refused rather than read as the current folder or taken as not given.

    >>> nonempty_path("")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: an empty path
    """
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text


def not_applying(flags: list[str], condition: str) -> UsageError:
    """The refusal of ``flags`` (given, non-empty) that change nothing ``condition``.

    >>> print(not_applying(["--out"], "with --no-plots"))
    --out does not apply with --no-plots
    >>> print(not_applying(["--interval", "--horizon"], "with --modes static"))
    --interval and --horizon do not apply with --modes static
    """
    verb = "does" if len(flags) == 1 else "do"
    return UsageError(f"{' and '.join(flags)} {verb} not apply {condition}")


def said_interrupted(command: str) -> int:
    """Say on stderr, in one line, that Ctrl-C stopped ``command``; return its exit code
    (130, as a shell reports a process SIGINT ended)."""
    import sys

    from dprobe.journal_log import error_prefix

    print(f"{error_prefix()}dprobe {command}: interrupted", file=sys.stderr)
    return 130
