"""A tenant map entry whose tenant is no tenant name is named, with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from dprobe.collectors.tenant_map import load_tenant_map
from dprobe.errors import UsageError


def _problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "tenants.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        load_tenant_map(path)
    return str(err.value).removeprefix(f"tenant map {path}: ").split("; ")


def test_each_entry_that_maps_to_no_tenant_name_is_named_with_its_line(tmp_path: Path) -> None:
    text = (
        "# the tenants of this node\n"
        "[users]\n"
        'alice = "vc-a"\n'
        "bob = 7\n"
        '"1000" = ["vc-b"]\n'
        "\n"
        "[namespaces]\n"
        'team-vision = ""\n'
        f'team-nlp = "{"n" * 257}"\n'
    )
    assert _problems(tmp_path, text) == [
        "[namespaces] 'team-vision' (line 8): expected a tenant name of 1 to 256 "
        "characters, got ''",
        "[namespaces] 'team-nlp' (line 9): expected a tenant name of 1 to 256 "
        "characters, got a string of 257 characters",
        "[users] 'bob' (line 4): expected a tenant name of 1 to 256 characters, got 7",
        "[users] '1000' (line 5): expected a tenant name of 1 to 256 characters, got ['vc-b']",
    ]


def test_a_table_that_is_no_table_is_named(tmp_path: Path) -> None:
    assert _problems(tmp_path, 'users = "vc-a"\n') == [
        'users (line 1) is not a table: write [users] on a line of its own, then name = "tenant" '
        "lines"
    ]


def test_a_slice_that_never_matches_and_a_control_character_are_named_with_their_line(
    tmp_path: Path,
) -> None:
    text = (
        '[slices]\n"research.slice" = "vc-r"\n"system.slice" = "vc-s"\n[users]\nbob = "vc\\u0007"\n'
    )
    problems = _problems(tmp_path, text)
    assert [p.split(":", 1)[0] for p in problems] == [
        "[users] tenant 'vc\\x07' (line 5) holds a control character",
        "[slices] key 'system.slice' (line 3) can never match",
    ]


def test_keys_outside_tables_unknown_tables_and_nested_entries_are_named_with_their_line(
    tmp_path: Path,
) -> None:
    lines = [
        "# tenants of gpu-17",
        'alice = "vc-a"',
        "[pod]",
        '"ml/t-0" = "vc-a"',
        "[users]",
        'bob.name = "vc-b"',
        "[[namespaces]]",
        'x = "vc-x"',
        '[pods."ml/t-1"]',
        'tenant = "vc-c"',
    ]
    at = {line: f" (line {n})" for n, line in enumerate(lines, 1)}
    problems = _problems(tmp_path, "\n".join(lines) + "\n")
    listed = "[pods], [namespaces], [accounts], [slices], [users]"
    assert problems == [
        f"key(s) alice{at[lines[1]]} outside any table: put each in one of {listed}",
        f"unknown tables [pod]{at['[pod]']} (did you mean [pods]?): use {listed}",
        f"[pods] 'ml/t-1'{at[lines[8]]}: expected a tenant name of 1 to 256 characters, "
        "got {'tenant': 'vc-c'}",
        f"namespaces{at['[[namespaces]]']} is not a table: write [namespaces] on a line of "
        'its own, then name = "tenant" lines',
        f"[users] 'bob'{at[lines[5]]}: expected a tenant name of 1 to 256 characters, "
        "got {'name': 'vc-b'}",
    ]
