"""The event-time hour an archive file's folder names, and the check that its rows lie in it.

An archive file lies in ``KIND/date=YYYY-MM-DD/hour=HH/``, the UTC hour of its records'
event times, and a replay reads the hours in time order. A file moved into another hour's
folder would be replayed out of event-time order (the worker takes what goes back in time
as late), so it is refused, naming it and the folder it belongs in.

Example:
    >>> hour_start(Path("jobs/date=2023-11-14/hour=22/jobs-p0-o0-o0.parquet"))
    1699999200.0
    >>> hour_start(Path("jobs/date=2023-11-14/hour=7/jobs-p0-o0-o0.parquet"))  # unpadded
    1699945200.0
    >>> hour_start(Path("/tmp/jobs-p0-o0-o0.parquet")) is None  # one file, copied out
    True
"""

from __future__ import annotations

import calendar
import time
from pathlib import Path

from dprobe.errors import UsageError

HOUR_S = 3600.0


def hour_start(path: Path) -> float | None:
    """Epoch seconds at which the hour of ``path``'s folder begins (UTC); ``None`` for a
    file outside an archive's ``date=``/``hour=`` folders (one file, copied elsewhere);
    :class:`~dprobe.errors.UsageError` naming the folder when it names no hour."""
    hour, day = path.parent, path.parent.parent
    if not (hour.name.startswith("hour=") and day.name.startswith("date=")):
        return None
    try:
        d = time.strptime(day.name.removeprefix("date="), "%Y-%m-%d")
        h = int(hour.name.removeprefix("hour="))
    except ValueError:
        h = -1
    if not 0 <= h <= 23:
        raise UsageError(
            f"{hour}: not an hour of an archive (KIND/date=YYYY-MM-DD/hour=HH, in UTC)"
        )
    return float(calendar.timegm(d) + h * 3600)


def check_in_hour(path: Path, low: float, high: float, *, row: int | None = None) -> None:
    """:class:`~dprobe.errors.UsageError` unless event times ``low`` to ``high`` of the
    file ``path`` lie in its folder's hour (``row``: the row that does not)."""
    start = hour_start(path)
    if start is None or (start <= low and high < start + HOUR_S):
        return
    where = (
        f"row {row}: event time {_utc(low)}" if row else f"event times {_utc(low)} to {_utc(high)}"
    )
    kind = path.parent.parent.parent.name
    belongs = f"; it belongs in {kind}/{_folder(low)}" if _folder(low) == _folder(high) else ""
    raise UsageError(
        f"{path}: {where} UTC, outside the hour of its folder "
        f"({path.parent.parent.name}/{path.parent.name}, UTC): a replay would send it out "
        f"of event-time order{belongs}"
    )


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def _folder(ts: float) -> str:
    return time.strftime("date=%Y-%m-%d/hour=%H", time.gmtime(ts))
