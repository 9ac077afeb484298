"""The readable event line: one line per event, whose tenant reads back as one field."""

from __future__ import annotations

import json

import pytest

from dprobe.event_line import format_line
from dprobe.schema import Forecast, ModelInfo, ScalingEvent


def event(tenant: str, message: str = "") -> ScalingEvent:
    return ScalingEvent(
        event_id="e1", plan_id="p7", ts=1.7e9, time="", tenant=tenant, action="scale_up",
        current_quota_gpus=8, target_quota_gpus=16, delta_gpus=8,
        forecast=Forecast(horizon_s=3600, p50=12, p90=15.5), reason="forecast_above_quota",
        message=message, model=ModelInfo(name="dprobe-mmoe", version="3"),
    )  # fmt: skip


def test_a_plain_tenant_name_is_printed_as_it_is() -> None:
    line = format_line(event("vc-a.team_1"))
    assert line.split()[1] == "vc-a.team_1"


def tenant_of(line: str) -> tuple[str, str]:
    """The tenant field of ``line`` and the rest after it, read as the docstring of
    :func:`format_line` says: one word, or a JSON string."""
    rest = line.split(" ", 1)[1]
    if rest.startswith('"'):
        name, end = json.JSONDecoder().raw_decode(rest)
        return name, rest[end:].lstrip(" ")
    name, _, rest = rest.partition(" ")
    return name, rest


@pytest.mark.parametrize(
    "tenant", ["vc-a", "vc a", "team\tb", "line\nbreak", 'say "hi"', "\x1b[31m", "研究组"]
)
def test_the_tenant_reads_back_from_one_printable_line(tenant: str) -> None:
    line = format_line(event(tenant, message="p90 above quota"))
    assert line.isprintable()  # no line break, tab or terminal escape of the name
    name, rest = tenant_of(line)
    assert name == tenant
    assert rest.startswith("scale_up 8 -> 16 GPUs")
    assert line.endswith(' "p90 above quota"')
