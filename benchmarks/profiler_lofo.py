"""Leave-one-family-out accuracy of the job profiler's level prediction.

For each profile table (the shipped summary; the Lucid ``single_data.csv`` when
``DPROBE_TRACE_DIR`` is set or ``--table`` names one): hold out each model family, fit on
the rest, predict the held-out family's levels from attributes only, and compare with the
levels its measured utilisation and memory give. Prints accuracy for both regressors, the
majority-level baseline, the in-family (leave-one-row-out) accuracy and a per-family view.

    .venv/bin/python benchmarks/profiler_lofo.py [--table PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dprobe.models.levels import LEVELS
from dprobe.models.profiler import JobProfiler
from dprobe.models.profiler_eval import leave_one_family_out, leave_one_row_out
from dprobe.models.profiles import Profile, ProfileTableError, load_profiles, shipped_profiles


def report(name: str, rows: Sequence[Profile]) -> None:
    print(f"\n== {name}: {len(rows)} profiles, {len({r.family for r in rows})} families")
    results = {}
    regressors: tuple[Literal["ridge", "knn"], ...] = ("ridge", "knn")
    for reg in regressors:
        res = leave_one_family_out(rows, partial(JobProfiler, regressor=reg))
        results[reg] = res
        print(
            f"LOFO level accuracy ({reg:5s}): {res.accuracy:.3f} ({round(res.accuracy * res.n)}/"
            f"{res.n}); util MAE {res.util_mae:.1f} points"
        )
    print(f"majority-level baseline:     {results['ridge'].majority_accuracy:.3f}")
    print(f"in-family (leave-one-row-out): {leave_one_row_out(rows):.3f}")
    res = results["ridge"]
    print(
        "per family (ridge): " + ", ".join(f"{f} {ok}/{n}" for f, (ok, n) in res.per_family.items())
    )
    print("confusion (ridge), rows = measured level, columns = predicted:")
    print("      " + " ".join(f"{c:>4s}" for c in LEVELS))
    for t in LEVELS:
        print(f"  {t:3s} " + " ".join(f"{res.confusion.get((t, p), 0):4d}" for p in LEVELS))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", help="a profile table CSV (dprobe schema or Lucid shape)")
    args = ap.parse_args()
    table = args.table
    hint = "set DPROBE_TRACE_DIR or pass --table"
    if table is None and os.environ.get("DPROBE_TRACE_DIR"):
        candidate = Path(os.environ["DPROBE_TRACE_DIR"]) / "lucid-profiles" / "single_data.csv"
        table = str(candidate) if candidate.is_file() else None
        hint = f"no {candidate}: pass --table"
    rows: list[Profile] = []
    if table:  # read and checked before any table is scored
        try:
            rows = load_profiles(table)
        except ProfileTableError as exc:  # a missing or bad table: one line, exit 2
            ap.exit(2, f"{ap.prog}: {exc}\n")
        if len(families := sorted({r.family for r in rows})) < 2:  # nothing left to fit on
            why = f"1 model family ({families[0]}); holding one out needs at least 2"
            ap.exit(2, f"{ap.prog}: {table}: {why}\n")
    report("shipped table (models/data/profiles.csv)", shipped_profiles())
    if table:
        report(f"{table}", rows)
    else:
        print(f"\n({hint} to also score the Lucid profiles)")


if __name__ == "__main__":
    main()
