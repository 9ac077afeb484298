"""Create the worker's topics when they are missing, and read their layout.

Example:
    >>> import asyncio
    >>> from dprobe.config import WorkerSettings
    >>> asyncio.run(ensure_topics(WorkerSettings()))  # doctest: +SKIP
    {'dprobe.samples': 4, 'dprobe.jobs': 4, ...}
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, KafkaError

from dprobe import topic_configs
from dprobe.config import WorkerSettings
from dprobe.errors import DprobeError, UsageError
from dprobe.kafka_auth import connect_error, start_client, watching_auth
from dprobe.streams.group_window import announce_window, check_group_window
from dprobe.streams.topics import TopicNames
from dprobe.topic_create import create_topics

log = logging.getLogger(__name__)


class BrokerUnreachableError(DprobeError):
    retriable = True


class AppIdInUseError(UsageError):
    """The app id is the consumer group of workers that read other topics."""


def changelog_topics(s: WorkerSettings, samples_partitions: int) -> dict[str, int]:
    """The changelog topics of the worker's tables and their partition counts."""
    return {
        f"{s.app_id}-hosts-changelog": samples_partitions,
        f"{s.app_id}-windows-changelog": s.partitions,
        f"{s.app_id}-planning-changelog": 1,
    }


async def check_app_id(admin: AIOKafkaAdminClient, s: WorkerSettings) -> None:
    """Refuse to join a consumer group that committed offsets on topics this worker does
    not read: the workers of another pipeline (a replay worker started without its own
    ``--app-id`` would otherwise share the live workers' group, internal topics and
    planning state). Nothing is checked when the group's offsets cannot be read (a broker
    still electing its group coordinator, no right to describe groups)."""
    names = TopicNames.from_settings(s)
    try:
        offsets = await admin.list_consumer_group_offsets(s.app_id)
    except KafkaError as exc:
        log.debug("consumer group %s not checked: %r", s.app_id, exc)
        return
    ours = {*names.external(), names.updates, names.planning, *changelog_topics(s, 1)}
    ours.add(f"{s.app_id}-__assignor-__leader")  # faust's own, in every group of an app
    others = sorted({tp.topic for tp in offsets} - ours)
    if others:
        suggested = s.kafka.topic_prefix.rstrip(".-_") + "-worker"
        if suggested == s.app_id:
            suggested = f"{s.app_id}-2"
        raise AppIdInUseError(
            f"app id {s.app_id!r} is the consumer group of workers that read "
            f"{', '.join(others)}, not {names.samples}: start this worker with an app id of "
            f"its own (--app-id, DPROBE_WORKER_APP_ID: its own consumer group, internal "
            f"topics and planning state), e.g. --app-id {suggested}"
        )


async def ensure_topics(
    s: WorkerSettings, *, attempts: int = 30, joining: bool = False
) -> dict[str, int]:
    """Create missing external topics with ``s.partitions``; return partitions per topic.
    ``joining``: for a worker about to join its group, which must window as the group's
    running workers do (:func:`~dprobe.streams.group_window.check_group_window`)."""
    names = TopicNames.from_settings(s)
    admin = AIOKafkaAdminClient(**s.kafka.client_kwargs())
    started = time.monotonic()
    for attempt in range(attempts):
        with watching_auth() as watch:
            try:
                await admin.start()
                break
            except KafkaConnectionError as exc:
                if watch.failure is not None:  # not a broker still starting: do not retry
                    await admin.close()
                    raise connect_error(s.kafka, exc, watch) from None
                waited = time.monotonic() - started
                if attempt == attempts - 1:
                    raise BrokerUnreachableError(
                        f"Kafka at {s.kafka.bootstrap} is unreachable "
                        f"(tried for {waited:.0f} s): {exc}"
                    ) from exc
                log.warning(
                    "Kafka at %s is unreachable (for %.0f s so far); retrying",
                    s.kafka.bootstrap, waited,
                )  # fmt: skip
        await asyncio.sleep(min(0.5 * 2**attempt, 5.0))
    try:
        await check_app_id(admin, s)
        existing = set(await admin.list_topics())
        if names.updates in existing:  # refused for it alone, before the group is asked
            await check_update_partitions(admin, s, names.updates)
        if names.planning in existing:
            await check_planning_partitions(admin, s, names.planning)
        # a worker that starts its group (none runs, or no planning topic yet) marks the
        # length, once every check below has passed; one joining running workers marks
        # its window settings only, for the next to compare with (a planning worker older
        # than these marks dead-letters them: one record per worker start)
        starts = joining and (
            names.planning not in existing or await check_group_window(admin, s, names.planning)
        )
        # The internal updates topic is created here too: a consumer group that starts
        # before its topic exists is never assigned its partitions.
        missing = [t for t in (*names.external(), names.updates) if t not in existing]
        # plans are few: one partition keeps their events in order for every consumer;
        # cluster reports too, and compaction keeps the latest report of each source
        counts = {names.scaling_events: s.events_partitions, names.cluster: 1}
        # broker time on the samples topic: a host's skewed clock cannot also skew the
        # record timestamp that ingest checks event time against (max_clock_skew_s)
        configs = {names.samples: topic_configs.SAMPLES, names.cluster: topic_configs.COMPACTED}
        new = [
            NewTopic(
                t,
                counts.get(t, s.partitions),
                s.replication_factor,
                topic_configs=configs.get(t, {}),
            )
            for t in missing
        ]
        if names.planning not in existing:
            new.append(NewTopic(names.planning, 1, s.replication_factor))
        if new:
            log.info("creating topics %s", [t.name for t in new])
            await create_topics(admin, new)  # one that exists already: another worker won
        partitions = await wait_for_partitions(admin, list(names.external()))
        await check_update_partitions(admin, s, names.updates)
        for topic, wanted in counts.items():
            if partitions.get(topic, wanted) > wanted:
                log.warning(
                    "topic %s has %d partitions, more than the %d it is created with (a "
                    "client that read it before it existed may have made it with the "
                    "broker's default): %s",
                    topic, partitions[topic], wanted,
                    "plans are in order only within a partition, so consumers must apply "
                    "them in plan_seq order (dprobe events --plans, PlanAssembler), or "
                    "recreate it with worker.events_partitions"
                    if topic == names.scaling_events
                    else "reports of different sources reach the planner in no set order; "
                    "recreate it with one partition",
                )  # fmt: skip
        for topic in (names.samples, names.jobs):
            if partitions.get(topic, s.partitions) < s.partitions:
                log.warning(
                    "topic %s has %d partition(s), fewer than worker.partitions=%d: at most "
                    "%d worker(s) share its load (its partition count is fixed once the "
                    "worker's tables exist; a pipeline with more needs topics and an app id "
                    "of its own)",
                    topic, partitions[topic], s.partitions, partitions[topic],
                )  # fmt: skip
        # The tables' changelogs too: faust refuses a table write while it does not yet
        # see its changelog's partitions, which happens on a first start right after it
        # creates them itself.
        changelogs = changelog_topics(s, partitions[names.samples])
        await check_changelog_partitions(
            admin, s, changelogs, existing, samples=(names.samples, partitions[names.samples])
        )
        kinds = {names.samples: "samples", names.cluster: "cluster"}
        kinds.update(dict.fromkeys(changelogs, "changelog"))
        there = {t: kind for t, kind in kinds.items() if t in existing}  # left as they are
        await topic_configs.warn_if_unlike(admin, there, s.kafka.bootstrap)
        todo = [
            NewTopic(t, n, s.replication_factor, topic_configs=topic_configs.COMPACTED)
            for t, n in changelogs.items()
            if t not in existing
        ]
        if todo:
            await create_topics(admin, todo)
            # described with their partitions before going on: a worker's first table
            # write, or `dprobe topics create`'s listing, would not see them yet
            await wait_for_partitions(admin, [t.name for t in todo])
        if joining:  # newer than the windows it holds: workers that join next check against it
            await announce_window(s, names.planning, joined=not starts)
        return partitions
    finally:
        await admin.close()


class PartitionsChangedError(UsageError):
    """``worker.partitions`` differs from the partitions of the existing tenant-updates
    topic (the window stage's layout)."""


async def check_update_partitions(
    admin: AIOKafkaAdminClient, s: WorkerSettings, updates: str
) -> None:
    """Refuse to start when the tenant-updates topic exists with another partition count
    than ``s.partitions``. Every worker sends each samples partition's progress to
    ``s.partitions`` window partitions and the planner waits for that many: with more, a
    send to a partition that does not exist fails every batch; with fewer, the tenants of
    the other partitions never get a window closed and are planned as gone."""
    found = (await wait_for_partitions(admin, [updates])).get(updates, 0)
    if found and found != s.partitions:
        raise PartitionsChangedError(
            f"topic {updates} has {found} partition(s) but worker.partitions is "
            f"{s.partitions}: the window stage's partition count is fixed once its topics "
            f"exist. Start every worker of app id {s.app_id!r} with --partitions {found} "
            f"(DPROBE_WORKER_PARTITIONS, [worker] partitions), or start a new pipeline "
            f"with an app id of its own (--app-id) to use {s.partitions}"
        )


async def check_planning_partitions(
    admin: AIOKafkaAdminClient, s: WorkerSettings, planning: str
) -> None:
    """Refuse to start when the planning topic has more than one partition (made by a
    broker that creates topics on demand, or by hand): the one planner reads partition 0,
    where its table and the group's window marks are, and windows sent elsewhere would
    never be planned."""
    found = (await wait_for_partitions(admin, [planning])).get(planning, 0)
    if found > 1:
        raise PartitionsChangedError(
            f"topic {planning} has {found} partition(s) but the planning topic has one (the "
            f"one planner of app id {s.app_id!r} reads it in order): while no worker of the "
            f"app id runs, delete it and run `dprobe topics create --app-id {s.app_id}` (it "
            "makes it with one), or start a new pipeline with an app id of its own (--app-id)"
        )


async def check_changelog_partitions(
    admin: AIOKafkaAdminClient,
    s: WorkerSettings,
    wanted: dict[str, int],
    existing: set[str],
    *,
    samples: tuple[str, int],
) -> None:
    """Refuse to start when a table's existing changelog has another partition count than
    its table now needs: the hosts table is co-partitioned with the samples topic
    (``samples``: its name and partition count now), so partitions added to that topic
    would make every write of the new partitions fail."""
    there = [t for t in wanted if t in existing]
    found = await wait_for_partitions(admin, there) if there else {}
    changed = {t: (found[t], wanted[t]) for t in there if found.get(t) and found[t] != wanted[t]}
    if changed:
        what = ", ".join(f"{t} has {a} partition(s), needs {b}" for t, (a, b) in changed.items())
        raise PartitionsChangedError(
            f"the worker's tables no longer match their topics ({what}): partitions were "
            f"added to {samples[0]} ({samples[1]} now) after app id {s.app_id!r} first ran, "
            "and its hosts table is partitioned as that topic was (Kafka cannot take "
            "partitions away again). Start a new pipeline with an app id of its own "
            "(--app-id) and new topics (a topic prefix of its own)"
        )


async def wait_for_partitions(
    admin: AIOKafkaAdminClient, topics: list[str], *, wait_s: float = 30.0
) -> dict[str, int]:
    """Partitions of each of ``topics``, once the broker reports every one of them with
    its partitions (a topic created a moment ago may be described without them yet: on a
    fresh broker, while it also creates its consumer-offsets topic)."""
    deadline = time.monotonic() + wait_s
    while True:
        described = await admin.describe_topics(topics)
        partitions = {d["topic"]: len(d["partitions"]) for d in described}
        if all(partitions.get(t, 0) > 0 for t in topics) or time.monotonic() > deadline:
            return partitions
        await asyncio.sleep(0.2)


async def describe_topics(s: WorkerSettings, topics: list[str]) -> dict[str, int | None]:
    """Partitions of each of ``topics`` (``None``: it does not exist), without creating
    any (the metadata of all topics is asked for, never of named ones)."""
    admin = AIOKafkaAdminClient(**s.kafka.client_kwargs())
    await start_client(admin.start, admin.close, s.kafka, KafkaConnectionError)
    try:
        described = await admin.describe_topics()
        found = {d["topic"]: len(d["partitions"]) for d in described if d["error_code"] == 0}
        return {t: found.get(t) for t in topics}
    finally:
        await admin.close()
