"""Benchmark: what one NVML read costs the collector on a real GPU host.

On a GPU node the NVML backend replaces the synthetic one that
``benchmarks/collector_overhead.py`` measures; this script times the replacement alone:
``NvmlBackend.read()`` back to back (every GPU's utilisation, memory and clocks, its
processes and their per-process utilisation), reporting wall time and this process's CPU
time per read, the median over several runs. Exit 2 without an NVIDIA driver.

Usage (on a GPU host, with dprobe and nvidia-ml-py installed)::

    python benchmarks/nvml_read_cost.py --runs 5 --reads 200
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._counts import at_least
from dprobe.collectors.errors import BackendError
from dprobe.collectors.nvml import NvmlBackend
from dprobe.count_text import count_of


async def one_run(backend: NvmlBackend, reads: int) -> tuple[float, float, int, int]:
    """Wall and CPU seconds per read over ``reads`` reads, and the GPUs and processes the
    last read saw."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    reading = None
    for _ in range(reads):
        reading = await backend.read()
    wall = (time.perf_counter() - wall0) / reads
    cpu = (time.process_time() - cpu0) / reads
    assert reading is not None
    return wall, cpu, len(reading.gpus), len(reading.procs)


async def main_async(args: argparse.Namespace) -> int:
    backend = NvmlBackend(timeout_s=10.0)
    try:
        await backend.open()
    except BackendError as exc:
        print(f"{Path(__file__).name}: no usable NVML here: {exc}", file=sys.stderr)
        return 2
    try:
        await backend.read()  # the first read lists processes from scratch: not timed
        runs = [await one_run(backend, args.reads) for _ in range(args.runs)]
    finally:
        await backend.close()
    walls = [r[0] for r in runs]
    cpus = [r[1] for r in runs]
    gpus, procs = runs[-1][2], runs[-1][3]
    print(
        f"{gpus} GPU(s), {procs} process(es) on them; "
        f"{count_of(args.runs, 'run')} x {count_of(args.reads, 'read')}"
    )
    print(f"wall per read: median {statistics.median(walls) * 1e3:.2f} ms "
          f"(runs {', '.join(f'{w * 1e3:.2f}' for w in walls)})")  # fmt: skip
    print(f"CPU per read:  median {statistics.median(cpus) * 1e3:.2f} ms "
          f"(runs {', '.join(f'{c * 1e3:.2f}' for c in cpus)}); "
          f"{statistics.median(cpus) * 100:.2f} % of one core at a 1 s interval")  # fmt: skip
    return 0


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--reads", type=int, default=200, help="reads timed per run")
    args = p.parse_args()
    at_least(p, args, "--runs", "--reads")
    sys.exit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
