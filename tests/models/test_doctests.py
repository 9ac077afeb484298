"""The usage examples in the forecasting, profiler and trace-reader docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "dprobe.models.forecast.target",
    "dprobe.models.forecast.per_tenant",
    "dprobe.models.forecast.baselines",
    "dprobe.models.forecast.features",
    "dprobe.models.forecast.mmoe_net",
    "dprobe.models.forecast.replay",
    "dprobe.models.forecast.multitask",
    "dprobe.models.forecast.evaluation",
    "dprobe.models.profiles",
    "dprobe.models.profiler",
    "dprobe.models.profiler_eval",
    "dprobe.models.demand",
    "dprobe.traces.demand_series",
    "dprobe.traces.demand_windows",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no usage example"
    assert result.failed == 0
