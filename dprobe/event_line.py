"""A ScalingEvent as one readable line, as ``dprobe events`` and ``dprobe demo`` print it.

Example:
    >>> from dprobe.schema import Forecast, ModelInfo, ScalingEvent
    >>> ev = ScalingEvent(event_id="e1", plan_id="p7", ts=1.7e9, time="", tenant="vc-a",
    ...     action="scale_up", current_quota_gpus=8, target_quota_gpus=16, delta_gpus=8,
    ...     forecast=Forecast(horizon_s=3600, p50=12, p90=15.5), reason="forecast_above_quota",
    ...     message="p90 above quota", model=ModelInfo(name="dprobe-mmoe", version="3"))
    >>> print(format_line(ev))
    2023-11-14T22:13:20Z vc-a scale_up 8 -> 16 GPUs (+8) forecast 1h p50 12.0 p90 15.5 \
reason=forecast_above_quota plan=p7 id=e1 "p90 above quota"
"""

from __future__ import annotations

import json

from dprobe.schema import ScalingEvent
from dprobe.time_text import utc_text


def format_line(ev: ScalingEvent) -> str:
    """Time (UTC), tenant, action, current -> target GPUs, delta, forecast p50/p90 at its
    horizon, reason, plan id (with its sequence number and size when known), event id and
    the message (JSON-quoted), on one line. A tenant name that is not one printable word
    (a space, a quote, a control character) is JSON-quoted too, so it reads back whole."""
    when = utc_text(ev.ts)
    f = ev.forecast
    tenant = _word(ev.tenant)
    line = (
        f"{when} {tenant} {ev.action} {ev.current_quota_gpus:g} -> {ev.target_quota_gpus:g}"
        f" GPUs ({ev.delta_gpus:+g}) forecast {format_duration(f.horizon_s)} p50 {f.p50:.1f}"
        f" p90 {f.p90:.1f} reason={ev.reason} plan={ev.plan_id}"
    )
    if ev.plan_seq:
        line += f" seq={ev.plan_seq} size={ev.plan_size}"
    line += f" id={ev.event_id}"
    return f"{line} {json.dumps(ev.message)}" if ev.message else line


def _word(text: str) -> str:
    """``text`` as it is when it reads as one word of a line, else JSON-quoted.

    >>> _word("vc-a"), _word("vc a")
    ('vc-a', '"vc a"')
    """
    if text and text.isprintable() and '"' not in text and not any(c.isspace() for c in text):
        return text
    return json.dumps(text)


def format_duration(seconds: float) -> str:
    """A horizon in whole hours, minutes or seconds.

    >>> format_duration(3600), format_duration(600), format_duration(90)
    ('1h', '10m', '90s')
    """
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
