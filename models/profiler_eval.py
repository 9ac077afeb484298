"""Leave-one-family-out (LOFO) accuracy of the job profiler's level prediction.

For each model family F: fit the profiler on every other family, predict the level of
each of F's profiles from its attributes alone (batch size, AMP, params), and compare
with the level its *measured* util and memory give. This is the case the regressor
exists for: a job of a family never profiled. Also reported: the same with F in the
table (in-family interpolation, leave-one-row-out), and the majority-level baseline.

Example:
    >>> from dprobe.models.profiles import shipped_profiles
    >>> r = leave_one_family_out(shipped_profiles())
    >>> 0.0 <= r.accuracy <= 1.0 and r.n == len(shipped_profiles())
    True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dprobe.models.levels import LevelSettings
from dprobe.models.profiler import JobProfiler
from dprobe.models.profiles import Profile, load_profiles, shipped_profiles


@dataclass(frozen=True)
class LofoResult:
    """Accuracy of predicted levels; ``per_family[f] = (correct, total)``."""

    accuracy: float
    n: int
    util_mae: float
    majority_accuracy: float
    per_family: dict[str, tuple[int, int]] = field(default_factory=dict)
    confusion: dict[tuple[str, str], int] = field(default_factory=dict)


def true_level(p: Profile, profiler: JobProfiler) -> str:
    """The level a profile's measured footprint gives (same rule as the estimates)."""
    return profiler._make(p.gpu_util_pct, p.gpu_mem_mb, "family").level


def leave_one_family_out(
    profiles: Sequence[Profile],
    make: Callable[[], JobProfiler] | None = None,
    *,
    levels: LevelSettings | None = None,
) -> LofoResult:
    """Fit without each family in turn and predict its rows from attributes only."""
    make = make or (lambda: JobProfiler(levels=levels))
    judge = make()
    families = sorted({p.family for p in profiles})
    correct = 0
    abs_err = 0.0
    per_family: dict[str, tuple[int, int]] = {}
    confusion: Counter[tuple[str, str]] = Counter()
    truths: list[str] = []
    for fam in families:
        train = [p for p in profiles if p.family != fam]
        test = [p for p in profiles if p.family == fam]
        prof = make().fit(train)
        ok = 0
        for p in test:
            est = prof.estimate(batch_size=p.batch_size, amp=p.amp, params_m=p.params_m)
            truth = true_level(p, judge)
            truths.append(truth)
            confusion[(truth, est.level)] += 1
            ok += est.level == truth
            abs_err += abs(est.gpu_util_pct - p.gpu_util_pct)
        per_family[fam] = (ok, len(test))
        correct += ok
    n = len(truths)
    majority = Counter(truths).most_common(1)[0][1] / n if n else 0.0
    return LofoResult(
        accuracy=correct / n if n else 0.0,
        n=n,
        util_mae=abs_err / n if n else 0.0,
        majority_accuracy=majority,
        per_family=per_family,
        confusion=dict(confusion),
    )


def leave_one_row_out(
    profiles: Sequence[Profile], make: Callable[[], JobProfiler] | None = None
) -> float:
    """Level accuracy when the family is known but the exact row is held out."""
    make = make or JobProfiler
    judge = make()
    ok = n = 0
    for i, p in enumerate(profiles):
        rest = [q for j, q in enumerate(profiles) if j != i]
        est = make().fit(rest).estimate(family=p.family, batch_size=p.batch_size, amp=p.amp)
        ok += est.level == true_level(p, judge)
        n += 1
    return ok / n if n else 0.0


LUCID_TABLE = Path("lucid-profiles") / "single_data.csv"


def lucid_lofo(
    folders: Sequence[str | Path] = (), *, levels: LevelSettings | None = None
) -> tuple[str, dict[str, Any]]:
    """LOFO accuracy on the Lucid profiles: ``(one line, summary dict)``.

    The table is ``lucid-profiles/single_data.csv`` under the first of ``folders`` that
    holds one (a public traces folder); else the shipped summary of the same
    measurements (``models/data/profiles.csv``).

    >>> line, summary = lucid_lofo([])
    >>> line.startswith("profiler level accuracy, leave one family out"), summary["table"]
    (True, 'shipped')
    """
    table = next(
        (Path(f) / LUCID_TABLE for f in folders if (Path(f) / LUCID_TABLE).is_file()), None
    )
    rows = load_profiles(table) if table is not None else shipped_profiles()
    res = leave_one_family_out(rows, levels=levels)
    name = str(table) if table is not None else "shipped"
    where = f"Lucid {name}" if table is not None else "the shipped Lucid summary"
    line = (
        f"profiler level accuracy, leave one family out ({where}): "
        f"{res.accuracy:.3f} ({round(res.accuracy * res.n)}/{res.n} profiles, "
        f"{len(res.per_family)} families); majority level {res.majority_accuracy:.3f}"
    )
    summary = {
        "table": name,
        "accuracy": res.accuracy,
        "n": res.n,
        "families": len(res.per_family),
        "majority_accuracy": res.majority_accuracy,
        "util_mae": res.util_mae,
    }
    return line, summary
