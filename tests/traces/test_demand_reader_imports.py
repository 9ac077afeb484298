"""The demand trace readers stay plain Python: no Kafka, faust or stream-shell imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("aiokafka", "kafka", "faust", "dprobe.streams", "dprobe.collectors", "dprobe.sinks")


@pytest.mark.parametrize("name", ["demand_series.py", "demand_windows.py"])
def test_reader_imports_nothing_from_the_shells(name: str) -> None:
    tree = ast.parse((ROOT / "traces" / name).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    bad = [m for m in imported if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert imported and not bad
