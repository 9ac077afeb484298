"""Reader of the ``jobs-csv`` trace format (Philly/Chronus style), one job per row.

Columns (header required, extra columns ignored; every row has as many fields as the header)::

    job_id,user,num_gpu,submit_time,duration[,model_name,...]

``user`` is the tenant (VC). Times are in ``time_unit_s`` seconds per unit: the
Philly/Chronus MIX traces do not document their unit; dprobe reads them as **minutes**
(``time_unit_s=60``, the default; see ``docs/simulation.md`` for why). A file whose
header says ``submit_time_s`` / ``duration_s`` instead is read in seconds whatever the
setting (a time unit a user gave on the command line, named by ``time_unit_flag``, is
then refused rather than ignored). Any bad row raises :class:`~dprobe.errors.UsageError`
naming file and line, among them a job that would end after the schema's last time
(1e11 s) and names longer than the schema allows (:mod:`dprobe.traces.row_input`).

Example:
    >>> import io
    >>> head = "job_id,user,num_gpu,submit_time,duration,model_name\\n"
    >>> rows = io.StringIO(head + "7,vc_a,8,2,30,vgg16\\n")
    >>> [(j.job_id, j.tenant, j.num_gpu, j.submit_s, j.duration_s) for j in iter_jobs(rows)]
    [('7', 'vc_a', 8, 120.0, 1800.0)]
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dprobe.errors import UsageError
from dprobe.text_input import cannot_read, read_text
from dprobe.traces.row_input import (
    CSV_SUFFIXES,
    MAX_EPOCH_S,
    MAX_GAP_S,
    MAX_ID_CHARS,
    MAX_LABEL_CHARS,
    MAX_TENANT_CHARS,
    OnBad,
    csv_rows,
    field_count,
    open_text,
    parsed_rows,
    twice_named,
    unfit_name,
)

DEFAULT_TIME_UNIT_S = 60.0  # assumption: Philly/Chronus MIX times are minutes
REQUIRED = ("job_id", "user", "num_gpu")


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job of a trace; ``line`` is its 1-based line number in the file."""

    job_id: str
    tenant: str
    num_gpu: int
    submit_s: float
    duration_s: float
    model_name: str
    line: int


# Bounds of a sane trace (the largest real ones: 2,048-GPU jobs and 50-day runs in Helios);
# beyond them a value is a typo or an attack that would exhaust memory or never end.
MAX_JOB_GPUS = 65_536
MAX_DURATION_S = 366 * 86_400.0
MAX_TIME_S = MAX_EPOCH_S  # seconds since the epoch or the trace start: the schema's bound
MAX_VC_NODES = 100_000


def iter_jobs(
    source: str | Path | IO[str],
    *,
    time_unit_s: float = DEFAULT_TIME_UNIT_S,
    on_bad: OnBad | None = None,
    time_unit_flag: str | None = None,
) -> Iterator[JobRecord]:
    """Yield the jobs of ``source`` (a path or an open text file) in file order.

    A bad row raises; with ``on_bad`` it is passed to it (``FILE:LINE: why``) and skipped,
    and the rows after it are still checked against the jobs read (a duplicate job id).
    ``time_unit_flag``: the flag that gave ``time_unit_s``, when a user gave it; a header
    in seconds, which the time unit does not apply to, then raises naming it.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        if path.is_dir():
            raise UsageError(_folder_given(path))
        try:
            fh = open_text(path)
        except OSError as exc:
            raise UsageError(cannot_read(str(path), exc)) from None
        with fh:
            try:
                yield from _iter(fh, str(path), time_unit_s, on_bad, time_unit_flag)
            except OSError as exc:
                raise UsageError(cannot_read(str(path), exc)) from None
    else:
        name = getattr(source, "name", "<jobs-csv>")
        yield from _iter(source, name, time_unit_s, on_bad, time_unit_flag)


def _folder_given(path: Path) -> str:
    """What to say when ``path``, a folder, is given as the jobs file."""
    names = sorted(p.name for p in path.iterdir() if p.name.endswith(CSV_SUFFIXES))
    said = f"{path}: is a folder, not a jobs CSV file"
    if not names:
        return f"{said} (it holds no .csv or .csv.gz file)"
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"{said}: did you mean one of {shown} in it?"


def read_jobs(
    source: str | Path | IO[str],
    *,
    time_unit_s: float = DEFAULT_TIME_UNIT_S,
    time_unit_flag: str | None = None,
) -> list[JobRecord]:
    """All jobs of ``source``, sorted by submit time (stable); ``time_unit_flag`` as for
    :func:`iter_jobs`. A job submitted over a year after every job before it had finished
    raises (:func:`without_far_jobs`)."""
    jobs = iter_jobs(source, time_unit_s=time_unit_s, time_unit_flag=time_unit_flag)
    name = str(source) if isinstance(source, str | Path) else getattr(source, "name", "<jobs-csv>")
    return without_far_jobs(jobs, name, None)


def without_far_jobs(jobs: Iterable[JobRecord], name: str, on_bad: OnBad | None) -> list[JobRecord]:
    """``jobs`` by submit time, less a job submitted more than :data:`MAX_GAP_S` (a year)
    after every job before it ended: a typo, most likely, that would stretch a simulation's
    span (its allocation ratio) and an evaluation's windows, and across which a replay's
    synthetic hosts would send a snapshot each tick. Such a job raises, or with ``on_bad``
    is passed to it and skipped."""
    out: list[JobRecord] = []
    end = -math.inf  # when the jobs kept so far have all finished
    for job in sorted(jobs, key=lambda j: j.submit_s):
        if out and job.submit_s - end > MAX_GAP_S:
            err = UsageError(
                f"{name}:{job.line}: submitted {(job.submit_s - end) / 86_400:,.0f} days after "
                "every job before it had finished (a digit too many?)"
            )
            if on_bad is None:
                raise err
            on_bad(str(err))
            continue
        end = max(end, job.submit_s + job.duration_s)
        out.append(job)
    return out


def _iter(
    fh: IO[str], name: str, unit: float, on_bad: OnBad | None, unit_flag: str | None = None
) -> Iterator[JobRecord]:
    if not (unit > 0 and math.isfinite(unit)):
        raise UsageError(f"time unit must be > 0 seconds, got {unit}")
    rows = csv_rows(fh, name=name, on_bad=on_bad)
    _, header = next(rows, (1, None))
    if header is None:
        raise UsageError(f"{name}:1: empty file, expected a jobs-csv header")
    cols = {c.strip(): i for i, c in enumerate(header)}
    missing = [c for c in REQUIRED if c not in cols]
    t_col, d_col, scale = "submit_time", "duration", unit
    if "submit_time_s" in cols and "duration_s" in cols:
        t_col, d_col, scale = "submit_time_s", "duration_s", 1.0
        if unit_flag is not None:  # given, but it would change nothing
            raise UsageError(
                f"{name}:1: {unit_flag} does not apply: the header names submit_time_s and "
                "duration_s, which are read in seconds"
            )
    missing += [c for c in (t_col, d_col) if c not in cols]
    if missing:
        raise UsageError(f"{name}:1: missing column(s) {', '.join(missing)} (jobs-csv header)")
    if twice := twice_named([c.strip() for c in header], [*REQUIRED, t_col, d_col, "model_name"]):
        raise UsageError(f"{name}:1: {twice}")
    model_col = cols.get("model_name")
    seen: set[str] = set()  # the job ids of the rows accepted so far

    def job(line: int, row: list[str]) -> JobRecord | None:
        if not row or all(not c.strip() for c in row):
            return None
        if len(row) != len(header):  # one field more: an unquoted comma shifts the columns
            raise UsageError(f"{name}:{line}: {field_count(row, header)}")
        job_id = row[cols["job_id"]].strip()
        tenant = row[cols["user"]].strip()
        if not job_id or not tenant:
            raise UsageError(f"{name}:{line}: empty job_id or user")
        model = row[model_col].strip() if model_col is not None else ""
        problem = (
            unfit_name(job_id, "job_id", MAX_ID_CHARS)
            or unfit_name(tenant, "user", MAX_TENANT_CHARS)
            or unfit_name(model, "model_name", MAX_LABEL_CHARS)
        )
        if problem:
            raise UsageError(f"{name}:{line}: {problem}")
        if job_id in seen:
            raise UsageError(f"{name}:{line}: duplicate job_id {job_id!r}")
        gpus = cell_number(row[cols["num_gpu"]], "num_gpu", name, line)
        if gpus != int(gpus) or not 0 <= gpus <= MAX_JOB_GPUS:
            raise UsageError(
                f"{name}:{line}: num_gpu must be a whole number within [0, {MAX_JOB_GPUS}], "
                f"got {gpus:g}"
            )
        submit = cell_number(row[cols[t_col]], t_col, name, line)
        duration = cell_number(row[cols[d_col]], d_col, name, line)
        if submit < 0 or duration <= 0:
            raise UsageError(f"{name}:{line}: need {t_col} >= 0 and {d_col} > 0")
        if submit * scale > MAX_TIME_S or duration * scale > MAX_DURATION_S:
            raise UsageError(
                f"{name}:{line}: {t_col} must be at most {MAX_TIME_S:g} s and {d_col} at most "
                f"{MAX_DURATION_S:g} s (a year), got {submit * scale:g} and {duration * scale:g}"
            )
        if submit * scale + duration * scale > MAX_TIME_S:
            raise UsageError(
                f"{name}:{line}: the job ends at {submit * scale + duration * scale:g} s, "
                f"after the last time the schema allows ({MAX_TIME_S:g} s)"
            )
        seen.add(job_id)
        return JobRecord(
            job_id=job_id,
            tenant=tenant,
            num_gpu=int(gpus),
            submit_s=submit * scale,
            duration_s=duration * scale,
            model_name=model,
            line=line,
        )

    yield from parsed_rows(rows, job, on_bad)


def cell_number(text: str, col: str, name: str, line: int) -> float:
    """The finite number in column ``col`` at ``name:line``; :class:`UsageError` naming
    them otherwise (a CLI's exit 2)."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{name}:{line}: {col} {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{name}:{line}: {col} must be finite, got {text.strip()!r}")
    return value


def write_jobs(records: Iterable[JobRecord], path: str | Path) -> int:
    """Write ``records`` as a ``jobs-csv`` file in seconds (``submit_time_s,duration_s``
    header, read back whatever the time unit); returns the number of jobs written.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "jobs.csv"
    >>> write_jobs([JobRecord("1", "vc_a", 2, 90.0, 30.5, "bert", 0)], out)
    1
    >>> [(j.submit_s, j.duration_s) for j in read_jobs(out)]
    [(90.0, 30.5)]
    """
    n = 0
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "user", "num_gpu", "submit_time_s", "duration_s", "model_name"])
        for r in records:
            w.writerow(
                [r.job_id, r.tenant, r.num_gpu, repr(r.submit_s), repr(r.duration_s), r.model_name]
            )
            n += 1
    return n


def read_vc_nodes(source: str | Path) -> dict[str, int]:
    """Nodes per VC from a ``vc,node num`` CSV (Philly's ``philly_vc.csv``); a VC listed
    twice, an empty name or a row with more fields than the header is an error.

    The trace's ``user`` may carry a ``vc_`` prefix the VC file lacks; match with
    :func:`vc_key`.
    """
    path = Path(source)
    rows = csv_rows(io.StringIO(read_text(path), newline=""), name=str(path))
    _, first = next(rows, (1, []))
    header = [c.strip() for c in first]
    if header[:2] != ["vc", "node num"]:
        raise UsageError(f"{path}:1: expected header 'vc,node num', got {','.join(header)!r}")
    out: dict[str, int] = {}
    for line, row in rows:
        if not row:
            continue
        if len(row) > len(header):
            raise UsageError(f"{path}:{line}: {field_count(row, header)}")
        vc = row[0].strip()
        if not vc:
            raise UsageError(f"{path}:{line}: empty vc name")
        if vc in out:
            raise UsageError(f"{path}:{line}: vc {vc!r} is listed twice")
        try:
            nodes = int(row[1])
        except (IndexError, ValueError):
            raise UsageError(f"{path}:{line}: node num must be a whole number") from None
        if not 0 <= nodes <= MAX_VC_NODES:
            raise UsageError(f"{path}:{line}: node num must be within [0, {MAX_VC_NODES}]")
        out[vc] = nodes
    return out


def vc_key(tenant: str) -> str:
    """The VC file's name of a trace tenant: ``vc_6214e9`` -> ``6214e9``.

    >>> vc_key("vc_6214e9"), vc_key("6214e9")
    ('6214e9', '6214e9')
    """
    return tenant.removeprefix("vc_")
