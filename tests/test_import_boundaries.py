"""`models/` and `sim/` are plain Python: they never import Kafka, faust or the shells."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = (
    "aiokafka",
    "faust",
    "kafka",
    "mode",
    "dprobe.streams",
    "dprobe.collectors",
    "dprobe.sinks",
    "prometheus_client",
)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("folder", ["models", "sim"])
def test_core_never_imports_shells(folder: str) -> None:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"{folder}/ has no Python files"
    bad = [
        f"{f.relative_to(ROOT)}: {name}"
        for f in files
        for name in _imports(f)
        if any(name == m or name.startswith(m + ".") for m in FORBIDDEN)
    ]
    assert bad == []
