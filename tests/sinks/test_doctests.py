"""The usage examples in the docstrings of the exporter, lag, server and consumer modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "dprobe.sinks.worker_metrics",
    "dprobe.sinks.metrics_server",
    "dprobe.sinks.seen_ids",
    "dprobe.commands.events",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0
    assert result.failed == 0


def test_seen_ids_forgets_the_oldest_first() -> None:
    from dprobe.sinks.seen_ids import SeenIds

    seen = SeenIds(maxlen=3)
    assert [seen.add(i) for i in ("a", "b", "c", "a", "d")] == [True, True, True, False, True]
    assert "b" not in seen and "a" in seen  # "a" was refreshed by its duplicate, "b" evicted
    with pytest.raises(ValueError, match="maxlen"):
        SeenIds(maxlen=0)
