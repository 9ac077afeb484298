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
from dprobe.schema import MAX_ID_CHARS
from dprobe.text_input import has_control_character, read_text
from dprobe.toml_lines import at_path

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
    """Read and validate a mapping file; raise :class:`UsageError` naming every problem."""
    path = Path(path).expanduser()
    text = read_text(path, max_bytes=16 << 20, what="tenant map ")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"tenant map {path}: {exc}") from None
    problems = _problems(doc, text)
    if problems:  # all of them at once, on one line (a service's error line)
        raise UsageError(f"tenant map {path}: {'; '.join(problems)}")
    tables = {name: {str(k): v for k, v in doc.get(name, {}).items()} for name in _TABLES}
    return TenantMap(**tables)


def _shown(value: object) -> str:
    """A value as an error line shows it: short, whatever its size."""
    if isinstance(value, str) and len(value) > MAX_ID_CHARS:
        return f"a string of {len(value)} characters"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _problems(doc: dict[str, object], text: str = "") -> list[str]:
    """Every problem of a parsed mapping file, one line each (none: it is valid)."""
    listed = ", ".join(f"[{t}]" for t in _TABLES)
    problems: list[str] = []
    loose = sorted(k for k, v in doc.items() if k not in _TABLES and not isinstance(v, dict))
    if loose:  # 'alice = "vc-a"' above every table: not a mapping of any kind
        named = ", ".join(k + at_path(text, k) for k in loose)
        problems.append(f"key(s) {named} outside any table: put each in one of {listed}")
    unknown = sorted(k for k, v in doc.items() if k not in _TABLES and isinstance(v, dict))
    if unknown:
        named = ", ".join(f"[{t}]{at_path(text, t)}{_did_you_mean(t)}" for t in unknown)
        problems.append(f"unknown tables {named}: use {listed}")
    for name in _TABLES:
        table = doc.get(name, {})
        if not isinstance(table, dict):
            problems.append(
                f"{name}{at_path(text, name)} is not a table: write [{name}] on a line of its own, "
                'then name = "tenant" lines'
            )
            continue
        for key, value in table.items():
            if not (isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS):
                problems.append(
                    f"[{name}] {key!r}{at_path(text, name, key)}: expected a tenant name of 1 "
                    f"to {MAX_ID_CHARS} characters, got {_shown(value)}"
                )
        bad = next(
            ((k, v) for k, v in table.items() if isinstance(v, str) and has_control_character(v)),
            None,
        )
        if bad is not None:
            problems.append(
                f"[{name}] tenant {bad[1]!r}{at_path(text, name, bad[0])} holds a control character"
            )
    slices = doc.get("slices", {})
    for key in slices if isinstance(slices, dict) else ():
        if not is_tenant_slice(key):
            problems.append(
                f"[slices] key {key!r}{at_path(text, 'slices', key)} can never match: name "
                "one slice unit ending in .slice, "
                "other than -.slice, system.slice, user.slice, machine.slice and the kubepods "
                "slices (map pods in [pods] or [namespaces])"
            )
    return problems
