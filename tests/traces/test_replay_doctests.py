"""The usage examples in the archive and replay modules run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "dprobe.sinks.archive_schema",
    "dprobe.sinks.parquet_archive",
    "dprobe.traces.archive_reader",
    "dprobe.traces.replay",
    "dprobe.traces.replay_demand",
    "dprobe.traces.replay_jobs",
    "dprobe.traces.replay_kafka",
    "dprobe.traces.replay_lenient",
    "dprobe.traces.replay_record",
    "dprobe.traces.replay_sources",
]


@pytest.mark.parametrize("name", MODULES)
def test_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no example"
    assert result.failed == 0
