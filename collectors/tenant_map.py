"""The operator's mapping from pods, namespaces, accounts, slices and users to tenants.

A TOML file; every table is optional::

    [pods]          # pod name, "namespace/pod" or pod UID -> tenant
    "ml-prod/trainer-0" = "vc-prod"
    [namespaces]    # Kubernetes namespace -> tenant
    team-vision = "vc-vision"
    [accounts]      # Slurm account (from an allowed environment variable) -> tenant
    proj123 = "vc-research"
    [slices]        # systemd slice (not system, user, machine or kubepods) -> tenant
    "research.slice" = "vc-research"
    [users]         # numeric uid or Unix user name -> tenant (not for processes in a pod)
    "1000" = "vc-nlp"
    alice = "vc-nlp"

Example:
    >>> m = TenantMap(namespaces={"team-a": "vc-a"})
    >>> m.namespaces["team-a"]
    'vc-a'
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from dprobe.collectors.cgroup import is_tenant_slice
from dprobe.errors import UsageError
from dprobe.text_input import has_control_character, read_text

_TABLES = ("pods", "namespaces", "accounts", "slices", "users")


@dataclass(frozen=True)
class TenantMap:
    """Lookup tables, each ``id -> tenant``."""

    pods: dict[str, str] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)
    accounts: dict[str, str] = field(default_factory=dict)
    slices: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)


def _did_you_mean(table: str) -> str:
    """`` (did you mean [T]?)`` for the table closest to a misspelt one, else "".

    >>> _did_you_mean("pod"), _did_you_mean("groups")
    (' (did you mean [pods]?)', '')
    """
    near = difflib.get_close_matches(table, _TABLES, n=1)
    return f" (did you mean [{near[0]}]?)" if near else ""


def load_tenant_map(path: Path | str) -> TenantMap:
    """Read and validate a mapping file; raise :class:`UsageError` naming what is wrong."""
    path = Path(path).expanduser()
    if not path.exists():
        raise UsageError(f"tenant map {path} does not exist")
    text = read_text(path, max_bytes=16 << 20, what="tenant map ")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"tenant map {path}: {exc}") from None
    listed = ", ".join(f"[{t}]" for t in _TABLES)
    loose = sorted(k for k, v in doc.items() if k not in _TABLES and not isinstance(v, dict))
    if loose:  # 'alice = "vc-a"' above every table: not a mapping of any kind
        raise UsageError(
            f"tenant map {path}: key(s) {', '.join(loose)} outside any table; put each in "
            f"one of {listed}"
        )
    unknown = sorted(set(doc) - set(_TABLES))
    if unknown:
        named = ", ".join(f"[{t}]{_did_you_mean(t)}" for t in unknown)
        raise UsageError(f"tenant map {path}: unknown tables {named}; use {listed}")
    tables: dict[str, dict[str, str]] = {}
    for name in _TABLES:
        table = doc.get(name, {})
        if not isinstance(table, dict) or not all(
            isinstance(v, str) and 0 < len(v) <= 256 for v in table.values()
        ):
            raise UsageError(f"tenant map {path}: [{name}] must map names to tenant strings")
        bad = next((v for v in table.values() if has_control_character(v)), None)
        if bad is not None:
            raise UsageError(
                f"tenant map {path}: [{name}] tenant {bad!r} holds a control character"
            )
        tables[name] = {str(k): v for k, v in table.items()}
    for key in tables["slices"]:
        if not is_tenant_slice(key):
            raise UsageError(
                f"tenant map {path}: [slices] key {key!r} can never match: name one slice "
                "unit ending in .slice, other than -.slice, system.slice, user.slice, "
                "machine.slice and the kubepods slices (map pods in [pods] or [namespaces])"
            )
    return TenantMap(**tables)
