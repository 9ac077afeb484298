"""Type-check the whole ``dprobe`` package as it is installed, with mypy.

The repository keeps its top-level folders (``collectors/``, ``streams/``, ``models/``,
...) and maps them into the one ``dprobe`` namespace through
``[tool.setuptools.package-dir]`` in ``pyproject.toml``. mypy has no such map: run on the
folders, it would name ``models/planner.py`` ``models.planner`` and leave every
``dprobe.models...`` import unresolved. This script builds, under ``build/typecheck/``, a
tree of symbolic links laid out as the installed package (``dprobe/models`` ->
``models/`` ...), read from that same table, so a new folder or file needs no edit here.
mypy then checks ``-p dprobe`` with every cross-package import resolved, and the paths
in its report are written back to the repository's own (``models/planner.py:12``). The
benchmark scripts are checked next, against the same tree.

Usage (what ``make typecheck`` runs; extra arguments go to mypy)::

    python scripts/typecheck.py
    python scripts/typecheck.py --no-incremental
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"


def package_dirs(pyproject: Path) -> dict[str, Path]:
    """``{"dprobe.models": ROOT/"models", ...}`` from setuptools' package-dir table."""
    table = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    return {name: (pyproject.parent / folder).resolve() for name, folder in table.items()}


def build_tree(dirs: dict[str, Path], tree: Path) -> dict[Path, Path]:
    """Lay the links out as the installed package; return {link folder: real folder}."""
    if tree.exists():
        shutil.rmtree(tree)
    mapped: dict[Path, Path] = {}
    for name in sorted(dirs, key=lambda n: n.count(".")):
        target = tree.joinpath(*name.split("."))
        target.mkdir(parents=True, exist_ok=True)
        mapped[target] = dirs[name]
        sub_packages = {n.split(".")[-1] for n in dirs if n.startswith(name + ".")}
        for entry in sorted(dirs[name].iterdir()):
            if entry.name in sub_packages or entry.name == "__pycache__":
                continue
            (target / entry.name).symlink_to(os.path.relpath(entry, target))
    return mapped


def real_path(line: str, mapped: dict[Path, Path]) -> str:
    """Rewrite ``build/typecheck/dprobe/models/x.py:3`` to ``models/x.py:3``."""
    for link, real in sorted(mapped.items(), key=lambda kv: -len(str(kv[0]))):
        prefix = os.path.relpath(link, ROOT) + os.sep
        if line.startswith(prefix):
            return os.path.relpath(real, ROOT) + os.sep + line[len(prefix) :]
    return line


def scripts_command(argv: list[str]) -> list[str]:
    """mypy over the scripts users run from a checkout (``benchmarks/*.py``): they import
    ``dprobe`` (resolved through the tree) and helpers of ``tests/`` (through the root),
    whose own errors are not theirs to report."""
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").glob("*.py"))
    return [
        sys.executable, "-m", "mypy", "--explicit-package-bases", "--follow-imports=silent",
        *argv, *scripts,
    ]  # fmt: skip


def main(argv: list[str]) -> int:
    mapped = build_tree(package_dirs(ROOT / "pyproject.toml"), TREE)
    worst = 0
    for cmd, path in (
        ([sys.executable, "-m", "mypy", "-p", "dprobe", *argv], str(TREE)),
        (scripts_command(argv), os.pathsep.join((str(TREE), str(ROOT)))),
    ):
        env = {**os.environ, "MYPYPATH": path}
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        for line in (proc.stdout + proc.stderr).splitlines():
            print(real_path(line, mapped))
        worst = max(worst, proc.returncode)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
