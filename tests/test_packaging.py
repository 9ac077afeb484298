"""Every Python package folder is listed in pyproject.toml, so `pip install .` ships it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_installed() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found: set[str] = set()
    for name, folder in cfg["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    data_only = {name for name in cfg["package-data"] if name not in found}
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - found - data_only == set(), "these packages have no __init__.py"


def test_every_data_folder_is_a_package_with_its_files() -> None:
    """Folders of data files only (the broker's scripts, the profiles) are packages of
    their own, so that setuptools ships them without a warning for each file."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = cfg["package-dir"]
    for name, patterns in cfg["package-data"].items():
        assert name in cfg["packages"]
        parent, _, leaf = name.rpartition(".")
        folder = ROOT / dirs[name] if name in dirs else ROOT / dirs[parent] / leaf
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{name}: nothing matches {pattern} in {folder}"
