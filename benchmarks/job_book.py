"""Job events of one tenant with 10,000 running jobs: events per second of the window stage.

No broker: the window stage (:class:`dprobe.streams.windows.Windows`) runs on an in-memory
table whose changelog counts records and bytes. Its job book is loaded with ``--jobs``
running jobs of one tenant (not timed), then ``--events`` further job events are applied
one per batch, as the jobs agent hands them over at low traffic (a new job submitted, a
queued one started, a running one finished, in turn, so about ``--jobs`` keep running).
Printed: events per second, changelog records and bytes per event, and the time to close
the window that holds those events (its flow summarises every job; what it used is then
dropped), medians of ``--runs`` runs.

``--before DIR`` runs the same measurement, in a child process, on the code of another
checkout (e.g. ``git worktree add /tmp/jb-before <commit>``) and prints both and their
ratio.

    python benchmarks/job_book.py [--jobs 10000] [--events 3000] [--runs 5] [--before DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._counts import at_least

T0 = 1_700_000_040.0
TENANT = "vc-big"


def _use_code_of(root: Path) -> None:
    """Import ``dprobe`` from the checkout at ``root`` (its top-level packages as
    pyproject's package-dir maps them), not from the installed one."""
    sys.path.insert(0, str(root))
    import dprobe

    dprobe.__path__[:] = [str(root / "dprobe"), str(root)]


MEASURED = (
    "dprobe.schema",
    "dprobe.sinks.worker_stats",
    "dprobe.streams.codec",
    "dprobe.streams.deadletter",
    "dprobe.streams.state.window_agg",
    "dprobe.streams.windows",
)


def _foreign_code(root: Path) -> str | None:
    """Why the modules measured cannot all come from the checkout at ``root``, or None:
    one it lacks would be imported from the installed dprobe instead."""
    for name in MEASURED:
        try:
            importlib.import_module(name)
        except Exception as exc:  # its code of another version: say what failed
            return f"cannot import its {name}: {exc}"
    imported = [*MEASURED, *sorted(n for n in sys.modules if n.startswith("dprobe."))]
    for name in imported:  # the measured ones first, then what they import
        where = getattr(sys.modules[name], "__file__", None)
        if where and not Path(where).is_relative_to(root):
            return f"it has no {name} (found only in {Path(where).parent})"
    return None


class _Table:
    """A table's data plus a changelog that only counts what it is sent."""

    key_serializer = value_serializer = "raw"

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.changelog_topic = self
        self.records = 0
        self.bytes = 0

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def __contains__(self, key: bytes) -> bool:
        return key in self.data

    async def send(self, *, key: bytes, value: bytes | None, **_: Any) -> Any:
        self.records += 1
        self.bytes += len(key) + len(value or b"")
        return None


class _Topic:
    def __init__(self) -> None:
        self.sent = 0

    async def send(self, *, key: bytes, value: bytes, partition: int | None = None) -> Any:
        self.sent += 1
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


def _event(offset: int, value: bytes) -> Any:
    return SimpleNamespace(
        value=value, message=SimpleNamespace(topic="updates", partition=0, offset=offset)
    )


async def _measure(jobs: int, events: int) -> dict[str, float]:
    from dprobe import schema
    from dprobe.sinks.worker_stats import WorkerStats
    from dprobe.streams import codec
    from dprobe.streams.deadletter import DeadLetters
    from dprobe.streams.state.window_agg import Partial, WindowSettings
    from dprobe.streams.windows import Windows

    table = _Table()
    stats = WorkerStats()
    stage = Windows(
        table=table, features_topic=_Topic(), stats=stats, sources=1,
        window=WindowSettings(window_s=60.0, grace_s=10.0),
        deadletter=DeadLetters(_Topic(), stats),
    )  # fmt: skip
    offset = 0

    def job(kind: schema.JobEventKind, n: int, ts: float) -> bytes:
        ev = schema.JobEvent(ts=ts, event=kind, job=f"train-{n:07d}", tenant=TENANT, gpus=8)
        return codec.encode_job(ev)

    def close(window_start: float) -> list[Any]:
        """The records that close the tenant's window at ``window_start``: a partial of
        it, then a watermark past its end."""
        part = Partial(
            tenant=TENANT, window_start=window_start, host="h1", seq=int(window_start),
            ts=window_start + 1.0, samples=1, instance_s=1.0, gpu_s=1.0, util_sum=50.0,
            levels=(0, 1, 0, 0), weighted_s=0.5,
        )  # fmt: skip
        wm = codec.SourceWatermark(source=0, ts=window_start + 60.0 + 10.0)
        return [codec.encode_partials([part]), codec.encode_watermark(wm)]

    load = [job(kind, n, T0 + 1e-3 * n) for n in range(jobs) for kind in ("submit", "start")]
    load += close(T0)  # the first window closes before the timed events
    for i in range(0, len(load), 500):  # loading is not timed
        await stage.on_updates([_event(offset + k, v) for k, v in enumerate(load[i : i + 500])])
        offset += 500
    ts = T0 + 60.0
    values = []
    for i in range(events):  # submit a new job, start it, finish the oldest running one
        n, step = divmod(i, 3)
        steps: list[tuple[schema.JobEventKind, int]] = [
            ("submit", jobs + n),
            ("start", jobs + n),
            ("finish", n),
        ]
        kind, which = steps[step]
        values.append(job(kind, which, ts + 50.0 * i / events))
    records, written = table.records, table.bytes
    began = time.perf_counter()
    for v in values:
        await stage.on_updates([_event(offset, v)])
        offset += 1
    took = time.perf_counter() - began
    per_event = (table.records - records) / events, (table.bytes - written) / events
    # the next window closes: its flow summarises every job of the book
    partial, watermark = close(T0 + 60.0)
    await stage.on_updates([_event(offset, partial)])
    emitted = stats.windows_emitted
    began = time.perf_counter()
    await stage.on_updates([_event(offset + 1, watermark)])
    close_s = time.perf_counter() - began
    assert stats.windows_emitted == emitted + 1, "the window did not close"
    return {
        "events_per_s": events / took,
        "records_per_event": per_event[0],
        "bytes_per_event": per_event[1],
        "window_close_ms": 1e3 * close_s,
    }


def measure(jobs: int, events: int, runs: int) -> dict[str, float]:
    """Medians over ``runs`` runs of :func:`_measure`."""
    results = [asyncio.run(_measure(jobs, events)) for _ in range(runs)]
    return {k: statistics.median(r[k] for r in results) for k in results[0]}


def _row(name: str, r: dict[str, float]) -> str:
    return (
        f"{name:<8}{r['events_per_s']:>12,.0f}{r['records_per_event']:>14.2f}"
        f"{r['bytes_per_event']:>16,.0f}{r['window_close_ms']:>18.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=10_000, help="running jobs of the tenant")
    p.add_argument("--events", type=int, default=3_000, help="job events timed")
    p.add_argument("--runs", type=int, default=5, help="runs (medians are printed)")
    p.add_argument("--before", type=Path, help="a checkout whose code to measure too")
    p.add_argument("--root", type=Path, help=argparse.SUPPRESS)  # the child of --before
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    a = p.parse_args(argv)
    at_least(p, a, "--jobs", least=0)
    at_least(p, a, "--events", "--runs")
    if a.before is not None and not (a.before / "dprobe" / "__init__.py").is_file():
        why = "not a checkout of dprobe (no dprobe/__init__.py there)"
        p.exit(2, f"{p.prog}: --before {a.before}: {why}\n")
    if a.root is not None:
        _use_code_of(a.root.resolve())
        if foreign := _foreign_code(a.root.resolve()):
            p.exit(2, f"{p.prog}: --before {a.root}: {foreign}\n")
    else:
        _use_code_of(Path(__file__).resolve().parents[1])
    after = measure(a.jobs, a.events, a.runs)
    before = None
    if a.before is not None:
        child = [sys.executable, __file__, "--root", str(a.before), "--json", "--jobs",
                 str(a.jobs), "--events", str(a.events), "--runs", str(a.runs)]  # fmt: skip
        done = subprocess.run(child, check=False, capture_output=True, text=True)
        if done.returncode:  # the other checkout's own refusal or failure, as it said it
            sys.stderr.write(done.stderr)
            return done.returncode
        before = json.loads(done.stdout)
    if a.json:
        print(json.dumps(after if before is None else {"before": before, "after": after}))
        return 0
    print(
        f"job book: one tenant with {a.jobs:,} running jobs, {a.events:,} job events one per "
        f"batch (median of {a.runs} run{'' if a.runs == 1 else 's'})"
    )
    print(f"{'':<8}{'events/s':>12}{'records/event':>14}{'bytes/event':>16}{'window close ms':>18}")
    if before is not None:
        print(_row("before", before))
    print(_row("after", after))
    if before is not None:
        print(
            f"after/before: {after['events_per_s'] / before['events_per_s']:,.1f}x events/s, "
            f"{before['bytes_per_event'] / after['bytes_per_event']:,.0f}x fewer changelog "
            "bytes per event, window close "
            f"{before['window_close_ms'] / after['window_close_ms']:,.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
