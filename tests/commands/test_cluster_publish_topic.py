"""``dprobe cluster publish`` into a cluster topic that exists already without compaction
(made by hand, or by a broker that creates topics on demand): the report is published,
with a warning that the topic deletes reports and the command that sets it right."""

from __future__ import annotations

import asyncio
import logging

import pytest

from dprobe.cli import main

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("policy", "warned"), [("delete", True), ("compact", False)])
async def test_publish_into_a_topic_that_deletes_reports_warns(
    kafka,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    policy: str,
    warned: bool,
) -> None:
    prefix = kafka.unique("cp") + "."
    topic = await kafka.create_named(f"{prefix}cluster", 1, **{"cleanup.policy": policy})
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    monkeypatch.delenv("DPROBE_CONFIG", raising=False)
    argv = ["--bootstrap", kafka.bootstrap, "cluster", "publish", "--capacity", "64"]
    with caplog.at_level(logging.WARNING):
        # main() runs its own event loop: in a thread, away from this test's
        assert await asyncio.to_thread(main, argv) == 0
    said = [r.getMessage() for r in caplog.records if f"topic {topic} has" in r.getMessage()]
    if warned:
        assert len(said) == 1
        assert said[0].startswith(
            f"topic {topic} has cleanup.policy=delete, not compact as dprobe creates it"
        )
        assert f"--entity-name {topic} --add-config cleanup.policy=compact" in said[0]
    else:
        assert said == []
