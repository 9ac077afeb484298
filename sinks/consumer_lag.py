"""Consumer lag of one consumer group, measured in-process on its own cadence.

Lag of a partition = its end offset (high watermark) minus the group's committed offset,
the definition kafka_exporter and KEDA use. A partition the group never committed counts
as lagging by everything the group would read from the beginning (end minus beginning
offset), since dprobe's worker starts at ``earliest``. Every ``interval_s`` the poller
asks Kafka (admin ``describe_topics`` and ``list_consumer_group_offsets``, a group-less
consumer's ``beginning_offsets``/``end_offsets``) and replaces :attr:`ConsumerLag.lags`; the
Prometheus exporter only reads that mapping. A failed refresh is logged, counted in
:attr:`ConsumerLag.errors` and retried at the next tick; the last values stay. A group
coordinator that is not ready yet (as on a new cluster) is waited for a few seconds first.

Each refresh also keeps the group's committed offsets (:attr:`ConsumerLag.committed`),
the log-end offsets (:attr:`ConsumerLag.ends`) and, with ``members=True``, the number of
members of the group (:attr:`ConsumerLag.members`, 0 while no consumer runs). Without
``topics``, the topics are those the group has committed offsets on (a group that has
committed none is logged once: it may be misspelt).

Example:
    >>> async def main() -> None:  # doctest: +SKIP
    ...     async with ConsumerLag(KafkaSettings(), "dprobe-worker", ["dprobe.samples"]) as lag:
    ...         await lag.refresh()
    ...         print(lag.lags)  # {("dprobe.samples", 0): 12, ...}
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupIdNotFound,
    KafkaError,
    NoError,
    NotCoordinatorError,
    for_code,
)

from dprobe.config import KafkaSettings
from dprobe.kafka_auth import auth_refused, watching_auth
from dprobe.lifecycle import AsyncService, cancel_and_wait

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
#: Answers of a group coordinator being elected or loading its offsets (a new cluster
#: creating its offsets topic, a broker restarting): a refresh is retried after each of
#: :data:`SETTLE_WAITS_S` before it counts as failed.
COORDINATOR_SETTLING = (
    CoordinatorNotAvailableError,
    CoordinatorLoadInProgressError,
    NotCoordinatorError,
)
SETTLE_WAITS_S = (0.5, 1.0, 2.0)


class ConsumerLag(AsyncService):
    """Polls the lag of ``group`` on ``topics`` every ``interval_s`` seconds.

    Lifecycle: ``await start()`` starts the background task, which connects and measures
    right away; Kafka being unreachable never fails the caller (it is logged, counted and
    retried every ``interval_s``). ``await stop()`` ends the task and closes the clients
    (idempotent); ``async with`` does both.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        group: str,
        topics: Iterable[str],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        members: bool = False,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.kafka = kafka
        self.group = group
        self.topics = tuple(topics)
        self.interval_s = interval_s
        self.describe_members = members
        self.lags: Mapping[tuple[str, int], int] = {}
        self.committed: Mapping[tuple[str, int], int] = {}
        self.ends: Mapping[tuple[str, int], int] = {}
        self.members: int | None = None
        self.errors = 0
        self.updated_at: float | None = None  # time.time() of the last successful refresh
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        # without configured topics: every topic the group was seen to commit on, so its
        # lag stays reported when Kafka expires the offsets of a group that stopped
        self._committed_topics: set[str] = set()
        self._missing: set[str] = set()  # named topics found missing at the last refresh
        self._said_uncommitted = False  # warned that the group has committed nothing
        self._failing = 0  # refreshes failed in a row, on Kafka's side
        self._connecting = asyncio.Lock()

    async def start(self) -> None:
        """Start polling in a background task (it connects, and reconnects, by itself)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"consumer-lag-{self.group}")

    async def wait(self) -> None:
        """Return when polling has ended (it ends only by an unexpected error, which this
        raises; a poller never started returns at once)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Stop polling and close the clients (idempotent)."""
        task, self._task = self._task, None
        try:
            if task is not None:
                await cancel_and_wait(task)  # re-raises what ended the task unexpectedly
        finally:
            await self._close_clients()

    async def refresh(self) -> Mapping[tuple[str, int], int]:
        """Measure now and replace :attr:`lags` (connecting first if needed).

        Raises ``KafkaError`` (or ``OSError``) when Kafka cannot answer.
        """
        admin, consumer = await self._connect()
        # metadata of all topics: asking for named ones could auto-create a missing one
        described = await admin.describe_topics()
        found = {t["topic"]: t["partitions"] for t in described if t["error_code"] == 0}
        topics = self.topics
        self._say_missing([t for t in topics if t not in found])
        if not topics:  # the topics the group has committed on, now or since the start
            every = await admin.list_consumer_group_offsets(self.group)
            self._committed_topics |= {tp.topic for tp in every}
            topics = tuple(sorted(self._committed_topics))
            self._say_uncommitted(not topics)
        partitions = [
            TopicPartition(topic, p["partition"])
            for topic in topics
            for p in sorted(found.get(topic, ()), key=lambda p: p["partition"])
        ]
        lags: dict[tuple[str, int], int] = {}
        committed_at: dict[tuple[str, int], int] = {}
        ends_at: dict[tuple[str, int], int] = {}
        if partitions:
            committed = await admin.list_consumer_group_offsets(self.group, partitions=partitions)
            ends = await consumer.end_offsets(partitions)
            starts = await consumer.beginning_offsets(partitions)
            for tp in partitions:
                key = (tp.topic, tp.partition)
                meta = committed.get(tp)
                if meta is not None and meta.offset >= 0:
                    committed_at[key] = meta.offset
                offset = committed_at.get(key, starts[tp])
                lags[key] = max(0, ends[tp] - offset)
                ends_at[key] = ends[tp]
        if self.describe_members:
            try:
                self.members = await self._members(admin)
            except KafkaError as exc:  # the lags above stand; the count is not known now
                log.debug("members of group %s not known: %r", self.group, exc)
                self.members = None
        self.lags, self.committed, self.ends = lags, committed_at, ends_at
        self.updated_at = time.time()
        return lags

    def _say_missing(self, missing: list[str]) -> None:
        """Warn once of each named topic that does not exist (a misspelt one would
        otherwise export no lag and no error); again if it goes away after it came."""
        for topic in missing:
            if topic not in self._missing:
                log.warning(
                    "consumer lag of group %s: topic %s does not exist, so no lag is measured "
                    "for it (check the topic names given; it is read once it exists)",
                    self.group, topic,
                )  # fmt: skip
        self._missing = set(missing)

    def _say_uncommitted(self, uncommitted: bool) -> None:
        """Warn once that the group has committed nothing (a misspelt group would
        otherwise export no lag, so no lag alert could fire, and say nothing)."""
        if uncommitted and not self._said_uncommitted:
            log.warning(
                "consumer lag of group %s: the group has committed no offsets, so no lag is "
                "measured for it (check the group name: a worker group's is its app_id; it "
                "is read once the group commits, or from the start when its topics are named)",
                self.group,
            )
        self._said_uncommitted = uncommitted

    async def _members(self, admin: AIOKafkaAdminClient) -> int:
        """Members of the group now (0: no consumer of it runs)."""
        return await group_members(admin, self.group)

    async def _run(self) -> None:
        while True:
            try:
                with watching_auth() as watch:
                    await self._refresh_settling()
            except asyncio.CancelledError:
                raise
            except (KafkaError, OSError) as exc:
                self.errors += 1
                self._failing += 1
                why = auth_refused(self.kafka) if watch.failure is not None else repr(exc)
                log.warning("consumer lag of group %s: refresh failed: %s", self.group, why)
            except Exception as exc:
                self.errors += 1
                log.exception("consumer lag of group %s: unexpected error", self.group)
                raise RuntimeError(f"consumer lag poller of {self.group} failed") from exc
            else:
                if self._failing:
                    # the failures were logged: say when the figures are fresh again
                    log.info(
                        "consumer lag of group %s: refreshed again after %d failed refresh(es)",
                        self.group, self._failing,
                    )  # fmt: skip
                self._failing = 0
            await asyncio.sleep(self.interval_s)

    async def _refresh_settling(self) -> None:
        """:meth:`refresh`, tried again after each of :data:`SETTLE_WAITS_S` while the
        group's coordinator is not ready (the last such error is raised)."""
        for wait in SETTLE_WAITS_S:
            try:
                await self.refresh()
            except COORDINATOR_SETTLING as exc:
                log.debug("consumer lag of group %s: %r; retrying in %g s", self.group, exc, wait)
                await asyncio.sleep(wait)
            else:
                return
        await self.refresh()

    async def _connect(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        """The connected clients, connecting them first if needed (raises ``KafkaError``)."""
        async with self._connecting:
            if self._admin is None or self._consumer is None:
                kw = self.kafka.client_kwargs()
                admin = AIOKafkaAdminClient(**kw)
                consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **kw)
                try:
                    await admin.start()
                    await consumer.start()
                except BaseException:
                    await consumer.stop()
                    await admin.close()
                    raise
                self._admin, self._consumer = admin, consumer
            return self._admin, self._consumer

    async def _close_clients(self) -> None:
        admin, consumer = self._admin, self._consumer
        self._admin = self._consumer = None
        if consumer is not None:
            await consumer.stop()
        if admin is not None:
            await admin.close()

    def __repr__(self) -> str:
        return f"ConsumerLag(group={self.group!r}, topics={self.topics!r})"


async def group_members(admin: AIOKafkaAdminClient, group: str) -> int:
    """Members of consumer group ``group`` now (0: no consumer of it runs). Raises the
    broker's error (a ``KafkaError``) when it could not describe the group, e.g. while
    its coordinator is still loading: that answer lists no member, yet some may run."""
    for response in await admin.describe_consumer_groups([group]):
        for described in response.groups:
            if described[1] != group:
                continue
            error = for_code(described[0])
            if error is NoError or error is GroupIdNotFound:  # unknown group: none runs
                return len(described[5])
            raise error(f"describing consumer group {group}")
    return 0
