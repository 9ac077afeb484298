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

from dprobe.models.levels import LevelSettings
from dprobe.models.profiler import JobProfiler
from dprobe.models.profiles import Profile


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
