"""Job-profile tables: the measured (or summarised) GPU footprint of model configurations.

One row (:class:`Profile`) = one model family at one batch size and precision, with its
GPU utilisation and memory. Two tables ship with the package, both summarised from the
Lucid profiles: ``models/data/profiles.csv`` (:data:`SHIPPED`, what the job profiler is
fitted on) and ``models/data/synthetic_profiles.csv`` (:data:`SYNTHETIC`, the footprints
the synthetic GPU backend gives its jobs, with memory-bandwidth utilisation). Two CSV
shapes are read (``#`` lines are comments):

- **dprobe schema** (both shipped tables):
  ``family,batch_size,amp,gpu_util_pct,gpu_mem_mb[,params_m][,sm_util_pct][,mem_util_pct]``
- **Lucid shape** (``single_data.csv`` of Hu et al., ASPLOS'23):
  ``model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label`` (``model`` ->
  family, ``gmem`` MiB -> gpu_mem_mb, ``gmem_util`` -> mem_util_pct). Lucid gives no
  parameter counts; :func:`load_profiles` fills ``params_m`` from the shipped table's
  families when it knows them.

A bad row raises :class:`ProfileTableError` naming the file and line (exit 2 on the CLI).

Example:
    >>> rows = shipped_profiles()
    >>> r = next(p for p in rows if p.family == "ResNet50" and p.batch_size == 128 and not p.amp)
    >>> r.gpu_util_pct, r.params_m
    (100.0, 25.6)
    >>> shipped_profiles(SYNTHETIC)[0].mem_util_pct
    74.0
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from dprobe.errors import UsageError

SHIPPED = "profiles.csv"
SYNTHETIC = "synthetic_profiles.csv"
_DPROBE_COLS = ("family", "batch_size", "amp", "gpu_util_pct", "gpu_mem_mb")
_LUCID_COLS = ("model", "batchsize", "amp", "gpu_util", "gmem")


class ProfileTableError(UsageError):
    """A profile table row does not follow the schema; ``str()`` names file and line."""


@dataclass(frozen=True, slots=True)
class Profile:
    """The GPU footprint of one model configuration (one table row)."""

    family: str
    batch_size: int
    amp: bool
    gpu_util_pct: float
    gpu_mem_mb: float
    params_m: float | None = None
    sm_util_pct: float | None = None
    mem_util_pct: float | None = None


def _num(row: dict[str, str], col: str, where: str, *, lo: float, hi: float) -> float:
    text = (row.get(col) or "").strip()
    try:
        v = float(text)
    except ValueError:
        raise ProfileTableError(f"{where}: {col}: not a number: {text!r}") from None
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ProfileTableError(f"{where}: {col}: {v:g} outside [{lo:g}, {hi:g}]")
    return v


def _opt(row: dict[str, str], col: str, where: str, *, lo: float, hi: float) -> float | None:
    if not (row.get(col) or "").strip():
        return None
    return _num(row, col, where, lo=lo, hi=hi)


def _amp(text: str, where: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes"):
        return True
    if t in ("0", "false", "no"):
        return False
    raise ProfileTableError(f"{where}: amp: expected 0/1/true/false, got {text!r}")


def parse_profiles(text: str, source: str = "<table>") -> list[Profile]:
    """Rows of a profile table given as CSV text (either shape; see module doc)."""
    lines = [
        (i + 1, ln) for i, ln in enumerate(text.splitlines()) if not ln.lstrip().startswith("#")
    ]
    lines = [(i, ln) for i, ln in lines if ln.strip()]
    if not lines:
        raise ProfileTableError(f"{source}: empty profile table")
    reader = csv.DictReader(io.StringIO("\n".join(ln for _, ln in lines)))
    header = [h.strip() for h in reader.fieldnames or []]
    reader.fieldnames = header
    if all(c in header for c in _DPROBE_COLS):
        lucid = False
    elif all(c in header for c in _LUCID_COLS):
        lucid = True
    else:
        raise ProfileTableError(
            f"{source}:{lines[0][0]}: header is neither the dprobe schema "
            f"({','.join(_DPROBE_COLS)}) nor Lucid's ({','.join(_LUCID_COLS)})"
        )
    out: list[Profile] = []
    for (line, _), row in zip(lines[1:], reader, strict=False):
        where = f"{source}:{line}"
        if None in row or any(v is None for v in row.values()):
            raise ProfileTableError(f"{where}: wrong number of fields")
        family = (row["model"] if lucid else row["family"]).strip()
        if not family:
            raise ProfileTableError(f"{where}: empty model family")
        batch_col = "batchsize" if lucid else "batch_size"
        batch = _num(row, batch_col, where, lo=1, hi=1e7)
        if batch != int(batch):  # a batch of 1.5 is no batch size, not batch size 1
            raise ProfileTableError(f"{where}: {batch_col}: not a whole number: {batch:g}")
        out.append(
            Profile(
                family=family,
                batch_size=int(batch),
                amp=_amp(row["amp"], where),
                gpu_util_pct=_num(
                    row, "gpu_util" if lucid else "gpu_util_pct", where, lo=0, hi=100
                ),
                gpu_mem_mb=_num(row, "gmem" if lucid else "gpu_mem_mb", where, lo=0, hi=1e7),
                params_m=None if lucid else _opt(row, "params_m", where, lo=0, hi=1e7),
                sm_util_pct=None if lucid else _opt(row, "sm_util_pct", where, lo=0, hi=100),
                mem_util_pct=_opt(
                    row, "gmem_util" if lucid else "mem_util_pct", where, lo=0, hi=100
                ),
            )
        )
    if not out:  # a header alone: nothing to fit, and an accuracy over no rows means nothing
        raise ProfileTableError(f"{source}: no profile rows under the header")
    return out


def shipped_profiles(table: str = SHIPPED) -> list[Profile]:
    """Rows of a table shipped in ``models/data/``: :data:`SHIPPED` (the profiler's, by
    default) or :data:`SYNTHETIC` (the synthetic workload's)."""
    text = resources.files("dprobe.models").joinpath("data", table).read_text(encoding="utf-8")
    return parse_profiles(text, source=table)


def load_profiles(path: str | Path) -> list[Profile]:
    """Rows of the table at ``path``; ``params_m`` missing -> the shipped family's value."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileTableError(f"{p}: cannot read: {exc}") from None
    rows = parse_profiles(text, source=str(p))
    known = {r.family.lower(): r.params_m for r in shipped_profiles() if r.params_m is not None}
    return [
        replace(r, params_m=known.get(r.family.lower())) if r.params_m is None else r for r in rows
    ]
