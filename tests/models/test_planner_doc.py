"""docs/planner.md's first example runs as shown and plans what its text describes."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "planner.md"


def test_the_planner_example_runs_as_shown() -> None:
    block = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert block is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.group(1), str(DOC), "exec"), {})
    moves = [line.split() for line in out.getvalue().splitlines()]
    by_tenant = {m[1]: m for m in moves}
    assert sorted(by_tenant) == ["vc-a", "vc-b"]
    assert len({m[0] for m in moves}) == 1  # one plan
    assert by_tenant["vc-a"][2] == "scale_up" and by_tenant["vc-b"][2] == "scale_down"
    # vc-a is raised to at least its p90 (88 GPUs, whole 8-GPU nodes) and the plan
    # moves quota, creating none
    assert float(by_tenant["vc-a"][4]) >= 88.0
    assert sum(float(m[5]) for m in moves) == 0.0
