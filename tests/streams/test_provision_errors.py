"""A worker that cannot get the topics it needs says why and exits 2 before it runs: a
topic the broker refuses to create, a table changelog whose partition count no longer
matches its topic, a state folder it cannot create."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from dprobe.config import KafkaSettings, WorkerSettings
from dprobe.errors import UsageError
from dprobe.streams.provision import PartitionsChangedError, changelog_topics, ensure_topics
from dprobe.streams.runner import _make_data_dir
from dprobe.streams.topics import TopicNames
from dprobe.topic_create import TopicCreateError
from tests.conftest import KafkaHelper


def _settings(kafka: KafkaHelper, tmp_path: Path, **kw) -> WorkerSettings:  # type: ignore[no-untyped-def]
    prefix = kafka.unique("prov") + "."
    s = WorkerSettings(
        app_id=kafka.unique("prov-workers"),
        partitions=2,
        data_dir=tmp_path,
        kafka=KafkaSettings(bootstrap=kafka.bootstrap, topic_prefix=prefix),
        **kw,
    )
    names = TopicNames.from_settings(s)
    kafka.created += [*names.external(), names.updates, names.planning]
    kafka.created += list(changelog_topics(s, 2))
    return s


@pytest.mark.integration
async def test_a_topic_the_broker_refuses_is_an_error_naming_it(kafka, tmp_path: Path) -> None:
    s = _settings(kafka, tmp_path, replication_factor=3)  # one broker here
    with pytest.raises(TopicCreateError, match=r"samples(, [^:]+)?: InvalidReplicationFactor") as e:
        await ensure_topics(s)
    assert str(e.value).count("InvalidReplicationFactorError") == 1  # one reason, said once


@pytest.mark.integration
async def test_samples_partitions_changed_under_the_tables_is_refused(
    kafka, tmp_path: Path
) -> None:
    s = _settings(kafka, tmp_path)
    await ensure_topics(s)  # the first start: samples and its changelog with 2 partitions
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        from aiokafka.admin import NewPartitions

        samples = f"{s.kafka.topic_prefix}samples"
        await admin.create_partitions({samples: NewPartitions(4)})
        # the broker answers before its metadata shows the new partitions: a worker started
        # in that moment still sees 2, as the tables do (nothing changed, for it)
        for _ in range(150):
            (described,) = await admin.describe_topics([samples])
            if len(described["partitions"]) == 4:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"{samples} never showed 4 partitions")
    finally:
        await admin.close()
    with pytest.raises(
        PartitionsChangedError, match=r"hosts-changelog has 2 partition\(s\), needs 4"
    ) as refused:
        await ensure_topics(s)
    # it names the topic that changed, and gives no advice Kafka cannot follow (a topic's
    # partitions cannot be taken away) or about a topic no table depends on (jobs)
    said = str(refused.value)
    assert f"partitions were added to {samples} (4 now)" in said
    assert "Put them back" not in said and "jobs" not in said


def test_the_state_folder_is_made_with_its_parents(tmp_path: Path) -> None:
    s = WorkerSettings(data_dir=tmp_path / "a" / "b" / "c")
    _make_data_dir(s)
    assert (tmp_path / "a" / "b" / "c").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"worker.data_dir .*file/x"):
        _make_data_dir(WorkerSettings(data_dir=tmp_path / "file" / "x"))
