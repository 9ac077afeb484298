"""The stream worker's own work per snapshot, without Kafka or faust: a floor for its speed.

Runs, in this process on one core, what the worker does to every snapshot of
``benchmarks/worker_throughput.py`` (the same snapshots: 8 GPUs x ``--procs-per-gpu``
processes, 8 tenants, 40 hosts) apart from reading, writing and committing records:

1. decode and validate the HostSnapshot (``schema.decode_snapshot``: also what the
   bare consume-and-decode loop of ``worker_throughput.py`` does);
2. dedupe and count gaps per host (``seq_tracker.observe``);
3. split it into one partial per tenant (``window_agg.split_snapshot``);
4. encode a batch's partials as one update message per tenant (``codec.encode_partials``);
5. decode those messages in the window stage (``codec.decode_update``);
6. fold every partial into its window shard (``window_agg.add_into``).

Prints microseconds per snapshot per step (median of ``--runs`` runs), their sum, and the
process samples per second one core could reach if the worker did nothing else: an upper
bound for ``worker_throughput.py``'s rate, whatever is done to the framework around it.

    python benchmarks/worker_floor.py [--snapshots 4000] [--runs 5] [--procs-per-gpu 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.worker_throughput as shape
from benchmarks._counts import at_least
from dprobe import schema
from dprobe.count_text import count_of
from dprobe.streams import codec
from dprobe.streams.state import seq_tracker
from dprobe.streams.state.bounds import shard_of
from dprobe.streams.state.window_agg import (
    Partial,
    WindowSettings,
    add_into,
    initial,
    split_snapshot,
)

HOSTS = 40
BATCH = 500  # records per batch: the worker's default batch_max


def one_run(values: list[bytes], cfg: WindowSettings) -> dict[str, float]:
    """Seconds per step for all of ``values``."""
    took: dict[str, float] = {}

    def timed(step: str, work: Callable[[], Any]) -> Any:
        began = time.perf_counter()
        out = work()
        took[step] = time.perf_counter() - began
        return out

    snaps = timed("decode", lambda: [schema.decode_snapshot(v) for v in values])

    def observe() -> None:
        states: dict[str, dict[str, Any]] = {}
        for s in snaps:
            state = states.get(s.host) or seq_tracker.initial()
            states[s.host] = seq_tracker.observe(state, seq=s.seq, ts=s.ts, reset_after_s=300.0)[0]

    timed("dedupe", observe)
    parts = timed("split", lambda: [split_snapshot(s, cfg) for s in snaps])

    def encode() -> list[bytes]:
        out = []
        for i in range(0, len(parts), BATCH):
            by_tenant: dict[str, list[Partial]] = {}
            for snapshot_parts in parts[i : i + BATCH]:
                for p in snapshot_parts:
                    by_tenant.setdefault(p.tenant, []).append(p)
            out += [codec.encode_partials(ps) for _, ps in sorted(by_tenant.items())]
        return out

    messages = timed("encode", encode)
    updates = timed("decode updates", lambda: [codec.decode_update(m) for m in messages])

    def fold() -> None:
        states: dict[tuple[str, float, int], dict[str, Any]] = {}
        for update in updates:
            assert isinstance(update, list)
            for p in update:
                key = (p.tenant, p.window_start, shard_of(p.host, cfg.host_shards))
                state = states.get(key)
                if state is None:
                    state = states[key] = initial(p.tenant, p.window_start)
                add_into(state, p)

    timed("fold", fold)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--snapshots", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--procs-per-gpu", type=int, default=8)
    ap.add_argument("--json", action="store_true", help="end with one JSON line")
    args = ap.parse_args()
    at_least(ap, args, "--snapshots", "--runs", "--procs-per-gpu")
    shape.PROCS_PER_GPU = args.procs_per_gpu
    rng = random.Random(1)
    t0 = 1_700_000_000.0
    values = [
        schema.encode(shape.snapshot(rng, f"h{k % HOSTS}", k // HOSTS, t0 + k // HOSTS))
        for k in range(args.snapshots)
    ]
    samples = 8 * args.procs_per_gpu
    runs = [one_run(values, WindowSettings()) for _ in range(args.runs)]
    per_step = {
        step: statistics.median(r[step] for r in runs) / args.snapshots * 1e6 for step in runs[0]
    }
    total = sum(per_step.values())
    for step, us in per_step.items():
        print(f"{step:>15}: {us:7.1f} us / snapshot")
    ceiling = samples / total * 1e6
    print(
        f"{'sum':>15}: {total:7.1f} us / snapshot of {samples} process samples -> at most "
        f"{ceiling:,.0f} process samples/s on one core (medians of {count_of(args.runs, 'run')})"
    )
    if args.json:
        print(
            json.dumps(
                {
                    "us_per_snapshot": per_step,
                    "total_us_per_snapshot": total,
                    "samples_per_snapshot": samples,
                    "ceiling_samples_per_s": ceiling,
                    "runs": args.runs,
                }
            )
        )


if __name__ == "__main__":
    main()
