"""Archive the raw topics (dprobe.samples, dprobe.jobs, dprobe.cluster) to hourly Parquet files.

Files are zstd-compressed, one per topic, partition and event-time hour, named by their
offset range (OUT/samples/date=2026-11-30/hour=13/samples-p0-o1200-o4799.parquet), so a
restart overwrites instead of duplicating. Offsets are committed only once the files are
on disk. Invalid records are counted, not archived. A topic that does not exist yet is
not created; it is archived once it appears. Stop with SIGTERM or Ctrl-C (buffers are
flushed first); --until-end stops once everything present has been archived.
A folder that cannot be created or written to exits 2 at start; a file that cannot be
written (disk full) stops the archive with exit 1, its records left uncommitted for the
next run; a commit Kafka refuses for the moment is retried at the next flush.
Without --out the folder is the setting [archive] out_dir (env DPROBE_ARCHIVE_OUT_DIR),
else ./archive.

  dprobe archive --out /data/dprobe-archive
  dprobe replay /data/dprobe-archive --format dprobe-parquet --speed 60
"""

from __future__ import annotations

import argparse

from dprobe.commands._common import settings
from dprobe.config import ArchiveSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        dest="out_dir",
        metavar="DIR",
        help="archive folder (default: [archive] out_dir, env DPROBE_ARCHIVE_OUT_DIR, "
        "else ./archive)",
    )
    p.add_argument("--group-id", help="consumer group (default dprobe-archive)")
    p.add_argument(
        "--flush-interval", type=float, dest="flush_interval_s", help="seconds between flushes (60)"
    )
    p.add_argument(
        "--flush-records", type=int, help="flush when this many records are buffered (200000)"
    )
    p.add_argument(
        "--until-end",
        action="store_true",
        help="stop once every partition is archived to its current end (a one-off export)",
    )


def archive_settings(args: argparse.Namespace) -> ArchiveSettings:
    """The archive's settings: flags > ``DPROBE_ARCHIVE_*`` > ``[archive]`` > defaults
    (a flag left out, ``--out`` included, does not override the others).

    >>> flags = dict(group_id=None, flush_interval_s=None, flush_records=None)
    >>> ns = argparse.Namespace(bootstrap=None, config=None, out_dir="/data/a", **flags)
    >>> archive_settings(ns).out_dir
    PosixPath('/data/a')
    """
    return settings(
        ArchiveSettings,
        args,
        out_dir=args.out_dir,
        group_id=args.group_id,
        flush_interval_s=args.flush_interval_s,
        flush_records=args.flush_records,
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal
    import sys

    from dprobe.sinks.archive_service import Archiver

    s = archive_settings(args)

    async def main() -> Archiver:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with Archiver(s) as archiver:
            print(
                f"archiving {', '.join(archiver.kinds)} to {s.out_dir} (group {s.group_id})",
                file=sys.stderr,
            )
            await archiver.run(stop, until_end=args.until_end)
        return archiver

    a = asyncio.run(main())
    print(
        f"archived {a.writer.records_written} records in {a.writer.files_written} file(s); "
        f"{a.invalid_records} invalid record(s) not archived",
        file=sys.stderr,
    )
    return 0
