"""Refuse a time step so fine that a command over a job trace would not end in
reasonable time (``simulate --interval``, ``evaluate --window-s`` of a jobs trace)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from dprobe.errors import UsageError

if TYPE_CHECKING:
    from dprobe.traces.jobs_csv import JobRecord


def jobs_span_s(streams: Iterable[Sequence[JobRecord]]) -> float:
    """The longest span of one stream's jobs: first submit to last end, without queueing.

    >>> from dprobe.traces.jobs_csv import JobRecord
    >>> jobs_span_s([[JobRecord("1", "a", 8, 10.0, 50.0, "vgg16", 2)], []])
    50.0
    """
    spans = [
        max(r.submit_s + r.duration_s for r in rs) - min(r.submit_s for r in rs)
        for rs in streams
        if rs
    ]
    return max(spans, default=0.0)


def _up_to_3_digits(x: float) -> float:
    """``x`` (> 0) rounded up to three significant digits.

    >>> _up_to_3_digits(0.086401), _up_to_3_digits(1234.0)
    (0.0865, 1240.0)
    """
    step = 10.0 ** (math.floor(math.log10(x)) - 2)
    return round(math.ceil(x / step - 1e-9) * step, 12)


def check_steps(
    flag: str, step_s: float, *, span_s: float, per_step: int, noun: str, most: int
) -> None:
    """Refuse ``step_s`` (given as ``flag``) when ``per_step`` ``noun`` per step over
    ``span_s`` seconds of jobs are more than ``most``, naming the smallest step that passes.

    >>> check_steps("--interval", 0.01, span_s=86_400.0, per_step=1, noun="planning intervals",
    ...             most=1_000_000)
    Traceback (most recent call last):
    ...
    dprobe.errors.UsageError: --interval 0.01: the jobs span 1.0 days, 8,640,000 planning \
intervals, more than a run takes in reasonable time (at most 1,000,000); give --interval \
0.0864 or more
    """
    count = per_step * span_s / step_s
    if count > most * (1 + 1e-9):  # the step suggested itself passes
        shown = f"{span_s / 86_400:.1f} days" if span_s >= 86_400 else f"{span_s / 60:.1f} min"
        raise UsageError(
            f"{flag} {step_s:g}: the jobs span {shown}, {count:,.0f} {noun}, more than a "
            f"run takes in reasonable time (at most {most:,}); give {flag} "
            f"{_up_to_3_digits(per_step * span_s / most):g} or more"
        )
