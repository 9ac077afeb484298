"""Imports between dprobe's top-level packages go one way only, and the plain-Python core
never imports Kafka, faust or Prometheus.

Layers (a file's layer is the package it is installed in, from ``pyproject.toml``'s
``[tool.setuptools.package-dir]``), and what each may import of dprobe besides itself:

- ``core`` (the modules ``dprobe/*.py``: schema, errors, config, ...): core only;
- ``models``: core; ``streams.state`` (the worker's pure state, ``streams/state/``): core,
  models; ``sinks``: core, models; ``traces``: core, models, sinks; ``sim``: core,
  models, traces; ``collectors``: core, models, sinks; ``streams``: core, models, sinks,
  streams.state;
- ``demo`` (``dprobe/demo/``): anything but commands and cli; ``commands``
  (``dprobe/commands/``): anything; ``cli`` (``dprobe/cli.py``): core, commands.

Every import counts: at module level, inside functions, under ``TYPE_CHECKING``, relative
ones. Imports by string (``importlib.import_module``) are not seen.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS = (
    "core",
    "models",
    "streams.state",
    "sinks",
    "traces",
    "sim",
    "collectors",
    "streams",
    "demo",
    "commands",
    "cli",
)
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "models": frozenset({"core"}),
    "streams.state": frozenset({"core", "models"}),
    "sinks": frozenset({"core", "models"}),
    "traces": frozenset({"core", "models", "sinks"}),
    "sim": frozenset({"core", "models", "traces"}),
    "collectors": frozenset({"core", "models", "sinks"}),
    "streams": frozenset({"core", "models", "sinks", "streams.state"}),
    "demo": frozenset(LAYERS) - {"commands", "cli"},
    "commands": frozenset(LAYERS),
    "cli": frozenset({"core", "commands"}),
}
# Plain Python: these layers decide things and run without a broker.
PURE = ("models", "sim", "streams.state")
THIRD_PARTY_BANNED = ("aiokafka", "faust", "kafka", "mode", "prometheus_client")


def layer_of(module: str) -> str | None:
    """The layer of an installed module name; ``None`` outside dprobe.

    >>> layer_of("dprobe.schema"), layer_of("dprobe.streams.state.job_book"), layer_of("faust")
    ('core', 'streams.state', None)
    """
    parts = module.split(".")
    if parts[0] != "dprobe":
        return None
    if len(parts) == 1:
        return "core"
    if parts[1:3] == ["streams", "state"]:
        return "streams.state"
    if parts[1] in LAYERS:
        return parts[1]
    return "core"


def installed_modules(root: Path) -> Iterator[tuple[Path, str]]:
    """Every ``.py`` file of the package with its installed module name (a package's
    ``__init__.py`` as ``PACKAGE.__init__``, so relative imports resolve alike)."""
    table = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, folder in table["package-dir"].items():
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root / folder).with_suffix("")
            yield path, ".".join([package, *rel.parts])


def imports(source: str, module: str) -> Iterator[tuple[int, str]]:
    """``(line, imported name)`` of every import in ``source``, relative ones resolved.

    ``from a import b`` yields ``a.b`` (``b`` may be a module of ``a``).

    >>> list(imports("def f():\\n    from . import codec\\n", "dprobe.streams.app"))
    [(2, 'dprobe.streams.codec')]
    """
    package = module.rpartition(".")[0]
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import | ast.ImportFrom)]
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base


def violations(path: str, source: str, module: str) -> list[str]:
    """``"file:line: imports NAME (...)"`` for each import ``module``'s layer may not make.

    >>> violations("models/x.py", "from dprobe.sinks import seen_ids\\n", "dprobe.models.x")
    ['models/x.py:1: imports dprobe.sinks.seen_ids (models may import: core)']
    """
    layer = layer_of(module)
    assert layer is not None, f"{path}: {module} is not a dprobe module"
    found: list[str] = []
    seen: set[tuple[int, str]] = set()  # one report per statement and layer or library
    for line, name in imports(source, module):
        target = layer_of(name)
        if (line, target or name.split(".")[0]) in seen:
            continue
        seen.add((line, target or name.split(".")[0]))
        if target is not None and target != layer and target not in ALLOWED[layer]:
            allowed = ", ".join(sorted(ALLOWED[layer])) or "nothing else of dprobe"
            found.append(f"{path}:{line}: imports {name} ({layer} may import: {allowed})")
        if layer in PURE and any(
            name == banned or name.startswith(banned + ".") for banned in THIRD_PARTY_BANNED
        ):
            found.append(f"{path}:{line}: imports {name} ({layer} is plain Python, no Kafka)")
    return found


MODULES = list(installed_modules(ROOT))


def test_every_module_has_a_layer() -> None:
    assert MODULES, "no module found: is pyproject.toml's package-dir read right?"
    assert {layer_of(name) for _, name in MODULES} == set(LAYERS)


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_go_the_allowed_way(layer: str) -> None:
    bad = [
        v
        for path, name in MODULES
        if layer_of(name) == layer
        for v in violations(str(path.relative_to(ROOT)), path.read_text(), name)
    ]
    assert bad == [], "imports against the allowed direction:\n" + "\n".join(bad)


def test_the_pure_state_package_imports_no_broker_when_imported() -> None:
    code = (
        "import sys, dprobe.streams.state.window_agg, dprobe.streams.state.job_book, "
        "dprobe.streams.state.seq_tracker, dprobe.streams.state.partition\n"
        f"print(sorted(m for m in {THIRD_PARTY_BANNED!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("dprobe.models.planner", "import dprobe.streams.app\n", "imports dprobe.streams.app"),
        (
            "dprobe.sinks.worker_metrics",
            "def f():\n    from dprobe.streams import codec\n",
            "x.py:2: imports dprobe.streams.codec",
        ),
        ("dprobe.streams.state.job_book", "from dprobe.streams import codec\n", "streams.codec"),
        ("dprobe.schema", "from dprobe.models import planner\n", "nothing else of dprobe"),
        ("dprobe.demo.run", "from dprobe.commands.events import run\n", "commands.events"),
        ("dprobe.cli", "from dprobe.streams.app import make_app\n", "streams.app"),
        ("dprobe.sim.run", "import faust\n", "imports faust (sim is plain Python"),
        ("dprobe.streams.state.partition", "from aiokafka import X\n", "imports aiokafka.X"),
        ("dprobe.models.demand", "import numpy, mode\n", "imports mode (models is plain"),
        ("dprobe.streams.state.__init__", "from .. import app\n", "dprobe.streams.app"),
        ("dprobe.models.planner", "from ..streams import app\n", "dprobe.streams.app"),
    ],
)
def test_a_forbidden_import_is_named(module: str, source: str, expected: str) -> None:
    found = violations("x.py", source, module)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("dprobe.streams.windows", "from dprobe.sinks.worker_stats import WorkerStats\n"),
        ("dprobe.streams.ingest", "from dprobe.streams.state import seq_tracker\n"),
        ("dprobe.demo.run", "from dprobe.event_line import format_line\n"),
        ("dprobe.commands.demo", "from dprobe.demo.run import Demo\n"),
        ("dprobe.cli", "from dprobe.commands import events\n"),
        ("dprobe.models.planner", "import numpy\nfrom dprobe import schema\n"),
    ],
)
def test_an_allowed_import_passes(module: str, source: str) -> None:
    assert violations("x.py", source, module) == []
