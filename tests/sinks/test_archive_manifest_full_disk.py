"""A disk that has no room left for the archive folder's manifest (written after each
commit) ends ``dprobe archive`` with one line naming the file, exit 1, like a full disk
refusing an archive file: no traceback."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dprobe import cli, schema
from dprobe.sinks import archive_manifest
from dprobe.sinks.archive_manifest import LOCK_NAME, MANIFEST_NAME

pytestmark = [pytest.mark.integration]


async def _jobs_topic(bootstrap: str, prefix: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{prefix}jobs", 1, 1)])
    finally:
        await admin.close()
    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        for i in range(3):
            ev = schema.JobEvent(ts=1.7e9 + i, event="submit", job=f"j{i}", tenant="a", gpus=1)
            await producer.send_and_wait(f"{prefix}jobs", key=b"j", value=schema.encode(ev))


def test_no_room_for_the_manifest_is_one_line_not_a_traceback(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = f"am{uuid.uuid4().hex[:8]}."
    asyncio.run(_jobs_topic(kafka_bootstrap, prefix))
    saves = []
    real_dump = json.dump

    def dump(obj: object, fh: Any, **kw: Any) -> None:  # the manifest's only writer
        saves.append(obj)
        if len(saves) > 1:  # the folder's first manifest fits; the disk is full after it
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_dump(obj, fh, **kw)

    monkeypatch.setattr(archive_manifest.json, "dump", dump)
    monkeypatch.delenv("DPROBE_CONFIG", raising=False)
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    out = tmp_path / "archive"
    group = f"g-{uuid.uuid4().hex[:8]}"
    argv = ["--bootstrap", kafka_bootstrap, "archive", "--out", str(out), "--until-end"]
    code = cli.main([*argv, "--group-id", group])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"dprobe archive: cannot write {out / MANIFEST_NAME}: No space left on device"
    )
    assert code == 1


def test_a_folder_that_cannot_lock_the_manifest_is_one_line_not_a_traceback(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = f"al{uuid.uuid4().hex[:8]}."
    asyncio.run(_jobs_topic(kafka_bootstrap, prefix))

    def no_locks(*_: Any) -> None:  # an NFS mount without a lock daemon
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(archive_manifest.fcntl, "flock", no_locks)
    monkeypatch.delenv("DPROBE_CONFIG", raising=False)
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    out = tmp_path / "archive"
    argv = ["--bootstrap", kafka_bootstrap, "archive", "--out", str(out), "--until-end"]
    code = cli.main([*argv, "--group-id", f"g-{uuid.uuid4().hex[:8]}"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"dprobe archive: cannot write {out / LOCK_NAME}: {os.strerror(errno.ENOLCK)}"
    )
    assert code == 1
