"""Run every script of ``benchmarks/`` at its defaults, one after another (``make bench``).

A script that needs what this machine lacks is skipped, saying what: the public traces
(``DPROBE_TRACE_DIR``, see the README) or an NVIDIA GPU (a working ``nvidia-smi``).
``job_inputs.py`` scores its validation span, not the test span the docs report. The
Kafka benchmarks start their own broker unless ``KAFKA_BOOTSTRAP`` names one. A failing
script does not stop the others; the exit status is 1 when any failed.

Usage::

    python scripts/run_benchmarks.py          # what `make bench` runs
    python scripts/run_benchmarks.py --list   # what would run or be skipped, and why
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEEDS_TRACES = frozenset({"calibration_folds", "job_inputs", "oracle_information"})
NEEDS_GPU = frozenset({"nvml_read_cost"})
ARGS = {"job_inputs": ["--test-start", "1970-01-05", "--test-end", "1970-01-08"]}


def has_gpu() -> bool:
    """Whether ``nvidia-smi`` runs and lists a GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and b"GPU" in done.stdout


def plan(names: list[str], *, traces: bool, gpu: bool) -> list[tuple[str, str | None]]:
    """``(script, why it is skipped or None)`` for each script name.

    >>> plan(["job_inputs", "planner_time", "nvml_read_cost"], traces=False, gpu=False)
    [('job_inputs', 'needs DPROBE_TRACE_DIR'), ('planner_time', None), ('nvml_read_cost', 'needs an NVIDIA GPU')]
    """  # noqa: E501
    out: list[tuple[str, str | None]] = []
    for name in names:
        why = None
        if name in NEEDS_TRACES and not traces:
            why = "needs DPROBE_TRACE_DIR"
        elif name in NEEDS_GPU and not gpu:
            why = "needs an NVIDIA GPU"
        out.append((name, why))
    return out


def main(argv: list[str]) -> int:
    # a module the scripts share (``_counts.py``) is no benchmark
    names = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem[0] != "_")
    steps = plan(names, traces=bool(os.environ.get("DPROBE_TRACE_DIR")), gpu=has_gpu())
    if argv == ["--list"]:
        for name, why in steps:
            print(f"{name}: {'skipped, ' + why if why else 'runs'}")
        return 0
    if argv:
        print(f"usage: {sys.argv[0]} [--list]", file=sys.stderr)
        return 2
    failed: list[str] = []
    for name, why in steps:
        if why is not None:
            print(f"== benchmarks/{name}.py: skipped ({why})", flush=True)
            continue
        cmd = [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *ARGS.get(name, [])]
        print(f"== benchmarks/{name}.py {' '.join(ARGS.get(name, []))}".rstrip(), flush=True)
        if subprocess.run(cmd, cwd=ROOT, check=False).returncode != 0:
            failed.append(name)
    skipped = [name for name, why in steps if why is not None]
    ran = len(steps) - len(skipped)
    print(
        f"== {ran - len(failed)} of {ran} benchmarks passed"
        + (f", failed: {', '.join(failed)}" if failed else "")
        + (f"; skipped: {', '.join(skipped)}" if skipped else ""),
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
