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
    kind_dir = path.parent.parent.parent
    padded = _padded(kind_dir)
    belongs = (
        f"; it belongs in {kind_dir.name}/{_folder(low, padded)}"
        if _folder(low) == _folder(high)
        else ""
    )
    raise UsageError(
        f"{path}: {where} UTC, outside the hour of its folder "
        f"({path.parent.parent.name}/{path.parent.name}, UTC): a replay would send it out "
        f"of event-time order{belongs}"
    )


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def _folder(ts: float, padded: bool = True) -> str:
    """The day and hour folders of ``ts``, as dprobe names them (``hour=04``) or, not
    ``padded``, as other tools do (``hour=4``).

    >>> _folder(1_699_935_000.0), _folder(1_699_935_000.0, padded=False)
    ('date=2023-11-14/hour=04', 'date=2023-11-14/hour=4')
    """
    t = time.gmtime(ts)
    hour = f"{t.tm_hour:02d}" if padded else str(t.tm_hour)
    return time.strftime("date=%Y-%m-%d/hour=", t) + hour


def _padded(kind_dir: Path) -> bool:
    """Whether the hour folders under ``kind_dir`` have a leading zero (``hour=04``, as
    dprobe writes them), so that a folder named to a user is one they see on disk; not
    when one of them is named without it (``hour=4``, as other tools write them)."""
    return not any(len(h.name) == len("hour=0") for h in kind_dir.glob("date=*/hour=*"))
