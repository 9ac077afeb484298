"""Helpers shared by the sub-commands: settings loading."""

from __future__ import annotations

import argparse
import os
from typing import Any, TypeVar

from dprobe.config import load

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
