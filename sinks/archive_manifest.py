"""What an archive folder holds: ``dprobe-archive.json`` at its top names the consumer
group that writes it, the Kafka cluster and the topics it reads, and the offset up to
which each partition was committed (archived for good).

The archive deletes files whose offsets were never committed (a crash between a file and
its commit) before it reads them again. Kafka's committed offsets alone cannot tell those
from files of other data with the same names: another group, another topic prefix,
another cluster, a topic deleted and created again, or a group whose offsets expired while
it was stopped. The manifest can: a folder of another archive is refused, and a partition
whose group offset is gone goes on from the manifest's own record, never deleting what
was committed.

Example:
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> m = ArchiveManifest("dprobe-archive", "c1", {"jobs": "dprobe.jobs"})
    >>> m.committed["jobs:0"] = 42
    >>> m.save(out, fsync=False)
    >>> ArchiveManifest.load(out) == m
    True
    >>> ArchiveManifest("other", "c1", {"jobs": "dprobe.jobs"}).differences(m)
    ["group 'other', not 'dprobe-archive'"]
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from dprobe.errors import UsageError
from dprobe.folders import fsync_dir
from dprobe.sinks.parquet_archive import ArchiveWriteError

MANIFEST_NAME: Final = "dprobe-archive.json"
LOCK_NAME: Final = ".dprobe-archive.lock"


@dataclass
class ArchiveManifest:
    """The identity of one archive (``group_id``, ``cluster_id``, ``topics``: kind ->
    topic) and ``committed``: ``"kind:partition"`` -> the next offset to archive.
    ``adopted``: the folder held files of an older dprobe (no manifest) when it was first
    written, so a partition without a record here may have files this archive did not
    write, and they are never deleted."""

    group_id: str
    cluster_id: str
    topics: dict[str, str]
    committed: dict[str, int] = field(default_factory=dict)
    adopted: bool = False  # the folder held files of an older dprobe when this was written

    @staticmethod
    def key(kind: str, partition: int) -> str:
        return f"{kind}:{partition}"

    def differences(self, written: ArchiveManifest) -> list[str]:
        """How this archive differs from the one that ``written`` describes ([] when the
        same). An empty cluster id (a broker that reports none) matches any."""
        out = []
        if self.group_id != written.group_id:
            out.append(f"group {self.group_id!r}, not {written.group_id!r}")
        if self.cluster_id and written.cluster_id and self.cluster_id != written.cluster_id:
            out.append(f"Kafka cluster {self.cluster_id!r}, not {written.cluster_id!r}")
        for kind in sorted(set(self.topics) & set(written.topics)):
            if self.topics[kind] != written.topics[kind]:
                out.append(f"topic {self.topics[kind]!r}, not {written.topics[kind]!r}")
        return out

    @classmethod
    def load(cls, out_dir: Path) -> ArchiveManifest | None:
        """The manifest of ``out_dir`` (``None`` when it has none);
        :class:`~dprobe.errors.UsageError` naming it when it cannot be read."""
        path = out_dir / MANIFEST_NAME
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                group_id=str(raw["group_id"]),
                cluster_id=str(raw["cluster_id"]),
                topics={str(k): str(v) for k, v in raw["topics"].items()},
                committed={str(k): int(v) for k, v in raw.get("committed", {}).items()},
                adopted=bool(raw.get("adopted", False)),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(
                f"{path}: not a readable archive manifest ({type(exc).__name__}: {exc}); "
                "it names the group, cluster and topics this folder archives. If it was "
                "damaged (a disk error), move it away: the archive then takes the folder as "
                "one an older dprobe wrote, goes on where its group has committed offsets "
                "and stops rather than write over any other file"
            ) from None

    def record(self, out_dir: Path, committed: dict[str, int], *, fsync: bool = True) -> None:
        """Add ``committed`` to the folder's manifest and save it. The members of one group
        share the folder, each committing its own partitions: the file is read again and
        written under a lock, so that no member writes back another's older offsets."""
        with _locked(out_dir):
            on_disk = ArchiveManifest.load(out_dir)
            if on_disk is not None:
                self.committed = on_disk.committed
            for key, offset in committed.items():  # never back: a late member's older one
                self.committed[key] = max(offset, self.committed.get(key, offset))
            self.save(out_dir, fsync=fsync)

    def refresh(self, out_dir: Path) -> None:
        """Take the committed offsets the folder's manifest holds now (another member of
        the group may have committed a partition this one is about to take over). No lock:
        :meth:`save` replaces the file whole."""
        on_disk = ArchiveManifest.load(out_dir)
        if on_disk is not None:
            self.committed = on_disk.committed

    def save(self, out_dir: Path, *, fsync: bool = True) -> None:
        """Write the manifest atomically (temp file, fsync, rename, fsync of the folder);
        :class:`~dprobe.sinks.parquet_archive.ArchiveWriteError` naming it when the disk
        refuses (full, read-only)."""
        path = out_dir / MANIFEST_NAME
        try:
            self._write(path, fsync=fsync)
        except OSError as exc:
            raise ArchiveWriteError.of(path, exc) from exc

    def _write(self, path: Path, *, fsync: bool) -> None:
        tmp = path.with_name(f".{MANIFEST_NAME}.tmp")
        body = {
            "group_id": self.group_id,
            "cluster_id": self.cluster_id,
            "topics": dict(sorted(self.topics.items())),
            "committed": dict(sorted(self.committed.items())),
            "adopted": self.adopted,
        }
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(body, fh, indent=1)
            fh.write("\n")
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if fsync:
            fsync_dir(path.parent)

    def describe(self) -> str:
        """``group 'g' on Kafka cluster 'c' (topics a, b)``."""
        topics = ", ".join(self.topics[k] for k in sorted(self.topics))
        return f"group {self.group_id!r} on Kafka cluster {self.cluster_id!r} (topics {topics})"


@contextlib.contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    """An exclusive lock on the folder's manifest, between processes."""
    path = out_dir / LOCK_NAME
    try:
        fh = open(path, "a")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise ArchiveWriteError.of(path, exc) from exc
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
        except OSError as exc:  # a file system without locks (NFS without its lock daemon)
            raise ArchiveWriteError.of(path, exc) from exc
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
