"""The model-family profile table the synthetic backend draws jobs from.

``profiles.csv`` (shipped with the package) summarises, per model family, the ranges of
GPU utilisation, memory-bandwidth utilisation and GPU memory measured over batch sizes
and AMP in the Lucid profiles (Hu et al., ASPLOS 2023); see the header of the CSV for the
citation. How a concrete job maps into a range (:meth:`Profile.at`) is an assumption of
this project: larger batches sit higher in the range, AMP lowers memory.

Example:
    >>> table = load_profiles()
    >>> resnet = table["ResNet50"]
    >>> resnet.util_lo <= resnet.at(batch_size=128, amp=False).util <= resnet.util_hi
    True
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class JobShape:
    """Steady-state utilisation of one job process: %, %, bytes."""

    util: float
    mem_util: float
    mem_bytes: float


@dataclass(frozen=True, slots=True)
class Profile:
    """One model family's measured ranges and how common it is (``share``)."""

    family: str
    util_lo: float
    util_hi: float
    mem_util_lo: float
    mem_util_hi: float
    mem_gib_lo: float
    mem_gib_hi: float
    batch_sizes: tuple[int, ...]
    amp: tuple[bool, ...]
    share: float

    def at(self, *, batch_size: int, amp: bool) -> JobShape:
        """Steady state of a job with ``batch_size`` and ``amp`` (assumption: linear in
        the batch size's rank; AMP takes the lower part of the memory range)."""
        sizes = self.batch_sizes
        rank = sizes.index(batch_size) / (len(sizes) - 1) if len(sizes) > 1 else 1.0
        util = self.util_lo + (self.util_hi - self.util_lo) * rank
        mem_util = self.mem_util_lo + (self.mem_util_hi - self.mem_util_lo) * rank
        mem_frac = rank * (0.6 if amp else 1.0)
        mem = (self.mem_gib_lo + (self.mem_gib_hi - self.mem_gib_lo) * mem_frac) * GIB
        return JobShape(util=util, mem_util=mem_util, mem_bytes=mem)


def parse_profiles(text: str) -> dict[str, Profile]:
    """Parse the CSV format of ``profiles.csv`` (``#`` lines are comments)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    table: dict[str, Profile] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        p = Profile(
            family=row["family"],
            util_lo=float(row["util_lo"]),
            util_hi=float(row["util_hi"]),
            mem_util_lo=float(row["mem_util_lo"]),
            mem_util_hi=float(row["mem_util_hi"]),
            mem_gib_lo=float(row["mem_gib_lo"]),
            mem_gib_hi=float(row["mem_gib_hi"]),
            batch_sizes=tuple(int(b) for b in row["batch_sizes"].split("|")),
            amp=tuple(a == "1" for a in row["amp"].split("|")),
            share=float(row["share"]),
        )
        if not (0 <= p.util_lo <= p.util_hi <= 100 and 0 < p.mem_gib_lo <= p.mem_gib_hi):
            raise ValueError(f"profile {p.family}: ranges out of order")
        table[p.family] = p
    if not table:
        raise ValueError("the profile table is empty")
    return table


@cache
def load_profiles(path: Path | None = None) -> dict[str, Profile]:
    """The shipped table, or the one at ``path`` (same CSV format)."""
    if path is not None:
        return parse_profiles(Path(path).read_text(encoding="utf-8"))
    text = resources.files("dprobe.collectors").joinpath("profiles.csv").read_text("utf-8")
    return parse_profiles(text)
