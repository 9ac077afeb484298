"""benchmarks/tenant_churn.py (docs/worker.md): ``--forget-h 0`` means never forget, as
its check says (``>= 0 hours (0: never)``); its table said "forget after 0 h"."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import run_benchmark

pytestmark = pytest.mark.slow  # runs a benchmark script as a process: seconds each

SMALL = ("--generations", "2", "--tenants", "2", "--life-h", "0.05", "--model", "last-value")


@pytest.mark.parametrize(("forget_h", "said"), [("0", "never"), ("1.5", "1.5 h")])
def test_the_table_says_when_tenants_are_forgotten(forget_h: str, said: str) -> None:
    done = run_benchmark("tenant_churn.py", *SMALL, "--forget-h", forget_h)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [line.split(" | ") for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert [row[1] for row in rows] == [said, said]
