"""`pip install .` (no extras) is the collector's install: the collector (and `lag`, `events`,
`topics`) run without the worker's and the tools' packages, and a command that needs them
says which extra to install, in one line."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dprobe.cli import EXTRAS

ROOT = Path(__file__).resolve().parents[1]

# Run dprobe with every module of the extras made impossible to import, as on a GPU node
# where only `pip install .` (no extras) was run.
BLOCKER = """
import importlib.abc, runpy, sys
BLOCKED = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["dprobe", *{argv!r}]
try:
    runpy.run_module("dprobe.cli", run_name="__main__")
finally:
    print("LOADED", sorted(m for m in BLOCKED if m in sys.modules), file=sys.stderr)
"""


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    code = BLOCKER.format(blocked=sorted(EXTRAS), argv=argv)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_base_install_holds_no_package_of_the_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {
        d.split("[")[0].split(">")[0].split("=")[0].split("<")[0] for d in project["dependencies"]
    }
    heavy = {"torch", "faust-streaming", "mode-streaming", "pyarrow", "numpy", "matplotlib"}
    assert base & heavy == set()
    assert "dprobe[worker]" in project["optional-dependencies"]["all"]


@pytest.mark.parametrize(
    "argv",
    [
        ["collect", "--backend", "synthetic", "--once"],
        ["collect", "--backend", "synthetic", "--no-send", "--max-ticks", "2",
         "--interval", "0.2", "--metrics-port", "0"],
        ["lag", "--help"],
        ["events", "--help"],
        ["topics", "--help"],
        ["config", "check"],  # the install steps of the collector's unit run it
        ["config", "show", "collector"],
    ],
)  # fmt: skip
def test_the_collector_runs_without_the_extras(argv: list[str]) -> None:
    done = _run(argv)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LOADED []" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("command", "extra"),
    [("worker", "worker"), ("simulate", "all"), ("demo", "all"), ("replay", "archive")],
)
def test_a_command_that_needs_an_extra_names_it_in_one_line(command: str, extra: str) -> None:
    args = {
        "worker": [], "simulate": ["--jobs", "x.csv", "--nodes", "2"], "demo": [],
        "replay": ["x.csv", "--format", "demand-csv", "--no-progress"],
    }[command]  # fmt: skip
    done = _run(["--bootstrap", "127.0.0.1:1", command, *args])
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith(f"dprobe {command}:")]
    assert done.returncode == 2, done.stderr[-2000:]
    # the one line, before anything was started (the demo starts a broker and a worker)
    assert len(lines) == 1 and f"pip install '.[{extra}]'" in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
