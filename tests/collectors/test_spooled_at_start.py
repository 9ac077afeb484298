"""What a start says of the snapshots a previous run left in the spool."""

from __future__ import annotations

import logging
from pathlib import Path

from prometheus_client import CollectorRegistry

from dprobe.collectors.assemble import build_collector
from dprobe.config import CollectorSettings


def _settings(tmp_path: Path) -> CollectorSettings:
    return CollectorSettings(
        host_id="h1",
        interval_s=0.01,
        spool_dir=tmp_path / "spool",
        state_dir=tmp_path / "state",
        synthetic_gpus=1,
        spool_fsync=False,
    )


async def test_a_start_with_no_send_does_not_promise_to_send_the_spool(
    tmp_path: Path, caplog
) -> None:
    first = build_collector(
        _settings(tmp_path), registry=CollectorRegistry(), send=False, max_ticks=3
    )
    async with first:
        await first.wait()
    again = build_collector(
        _settings(tmp_path), registry=CollectorRegistry(), send=False, max_ticks=1
    )
    with caplog.at_level(logging.INFO, logger="dprobe.collectors.service"):
        async with again:
            await again.wait()
    said = [r.getMessage() for r in caplog.records if r.name == "dprobe.collectors.service"]
    assert said == ["3 snapshots in the spool (sending is off: they stay there)"]
