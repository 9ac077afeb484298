"""Every usage example (``>>>``) in every module of the installed ``dprobe`` package runs.

The modules are found by walking the packages that ``pyproject.toml`` installs (the list
an install already needs), not from a list kept here, so a new module's examples run
without an edit. They are imported by their installed names (``dprobe.models...``), the
names their examples use: pytest's own ``--doctest-modules`` would import
``models/planner.py`` a second time as ``models.planner``, since the folders are mapped
into the ``dprobe`` namespace by ``[tool.setuptools.package-dir]``.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules_with_examples() -> list[str]:
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    names: list[str] = []
    for package in packages["packages"]:
        path = importlib.import_module(package).__path__
        for info in pkgutil.iter_modules(path, prefix=f"{package}."):
            spec = importlib.util.find_spec(info.name)
            origin = spec.origin if spec else None
            if origin and origin.endswith(".py") and ">>>" in Path(origin).read_text():
                names.append(info.name)
    return sorted(names)


MODULES = _modules_with_examples()


def test_the_walk_finds_every_folder() -> None:
    folders = {name.split(".")[1] for name in MODULES}
    assert {"collectors", "streams", "models", "sinks", "traces", "sim", "commands"} <= folders


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(module, name)
    assert sum(len(t.examples) for t in tests) > 0, f"no example found in {name}"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
