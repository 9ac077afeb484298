"""`make typecheck` sees the real package: imports across dprobe's folders resolve."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _typecheck_module():
    spec = importlib.util.spec_from_file_location("typecheck", ROOT / "scripts" / "typecheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_link_tree_mirrors_the_package_dir_map(tmp_path: Path) -> None:
    tc = _typecheck_module()
    dirs = tc.package_dirs(ROOT / "pyproject.toml")
    mapped = tc.build_tree(dirs, tmp_path / "tree")
    planner = tmp_path / "tree" / "dprobe" / "models" / "planner.py"
    assert planner.resolve() == (ROOT / "models" / "planner.py").resolve()
    assert (tmp_path / "tree" / "dprobe" / "schema.py").resolve() == ROOT / "dprobe" / "schema.py"
    line = f"{os.path.relpath(planner, ROOT)}:12: error: x"
    assert tc.real_path(line, mapped) == "models/planner.py:12: error: x"


def test_a_missing_function_of_another_folder_is_an_error(tmp_path: Path) -> None:
    tc = _typecheck_module()
    tree = tmp_path / "tree"
    tc.build_tree(tc.package_dirs(ROOT / "pyproject.toml"), tree)
    user = tmp_path / "user.py"
    user.write_text(
        "from dprobe.models.planner import ceil_to_node, no_such_function\n"
        "reveal_type(ceil_to_node)\n"
    )
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), str(user)],
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 1, res.stdout
    assert 'Module "dprobe.models.planner" has no attribute "no_such_function"' in res.stdout
    assert 'Revealed type is "def (gpus: float, node: int) -> int"' in res.stdout
