"""``dprobe topics create`` on the real broker: a topic that exists already with settings
other than those dprobe creates it with (made by hand, by an administrator's tooling, or
by a broker that creates topics on demand) is left as it is, with a warning naming the
setting, its value, the value dprobe needs and the command that sets it."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from dprobe.cli import main
from tests.topic_admin import create_topics, delete_topics

pytestmark = pytest.mark.integration


def test_existing_topics_with_other_settings_are_warned_of_by_name(
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}."
    app = f"{prefix}app"
    monkeypatch.setenv("DPROBE_KAFKA_TOPIC_PREFIX", prefix)
    # made with the broker's defaults (CreateTime, delete), except the jobs topic, whose
    # settings dprobe does not prescribe, and one changelog made as dprobe makes it
    made = {
        f"{prefix}samples": {},
        f"{prefix}jobs": {"cleanup.policy": "compact"},
        f"{prefix}cluster": {"cleanup.policy": "delete"},
        f"{app}-hosts-changelog": {"cleanup.policy": "delete"},
        f"{app}-planning-changelog": {"cleanup.policy": "compact,delete"},
    }
    asyncio.run(create_topics(kafka_bootstrap, {t: (1, c) for t, c in made.items()}))
    try:
        with caplog.at_level(logging.WARNING):
            code = main(["--bootstrap", kafka_bootstrap, "topics", "create", "--partitions", "1",
                         "--app-id", app])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        warned = sorted(
            r.getMessage() for r in caplog.records if "kafka-configs.sh" in r.getMessage()
        )
        assert len(warned) == 3, warned
        hosts, cluster, samples = warned  # in the order of their topics' names
        assert cluster.startswith(
            f"topic {prefix}cluster has cleanup.policy=delete, not compact as dprobe creates it"
        )
        assert hosts.startswith(
            f"topic {app}-hosts-changelog has cleanup.policy=delete, not compact as dprobe "
            "creates it"
        )
        assert samples.startswith(
            f"topic {prefix}samples has message.timestamp.type=CreateTime, not LogAppendTime "
            "as dprobe creates it"
        )
        assert (
            f"kafka-configs.sh --bootstrap-server {kafka_bootstrap} --alter --entity-type "
            f"topics --entity-name {prefix}samples --add-config "
            "message.timestamp.type=LogAppendTime" in samples
        )
        # the topics were left as they were: a second run says the same
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            code = main(["--bootstrap", kafka_bootstrap, "topics", "create", "--partitions", "1",
                         "--app-id", app])  # fmt: skip
        assert code == 0
        again = sorted(
            r.getMessage() for r in caplog.records if "kafka-configs.sh" in r.getMessage()
        )
        assert again == warned
    finally:
        asyncio.run(delete_topics(kafka_bootstrap, prefix))
