"""The faust app of ``dprobe worker``: topics, tables and agents wired from settings.

Example:
    >>> from dprobe.config import WorkerSettings
    >>> worker = build_app(WorkerSettings(), samples_partitions=4)  # doctest: +SKIP
    >>> worker.app.main()  # doctest: +SKIP

Scale out by starting more workers with the same ``app_id`` (one consumer group): they
split the partitions of ``dprobe.samples`` and of the internal tenant-updates topic, so
the parallelism is at most ``partitions`` (setting ``worker.partitions``, used when the
worker creates the topics).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust

from dprobe import schema
from dprobe.config import KafkaSettings, WorkerSettings
from dprobe.models.forecast.registry import make_forecaster
from dprobe.models.plan_loop import PlanLoop, PlanLoopSettings
from dprobe.models.worker_planner import planner_settings_of
from dprobe.sinks.worker_stats import WorkerStats
from dprobe.streams import codec, demand_settings
from dprobe.streams.deadletter import DeadLetters, where
from dprobe.streams.delivery import DeliveryFailed, delivered
from dprobe.streams.eager_delivery import EagerConsumer
from dprobe.streams.event_fence import FencedEvents, transactional_id
from dprobe.streams.fetch_guard import FetchGuardConsumer
from dprobe.streams.group_window import REMARK_S, announce_window
from dprobe.streams.ingest import Ingest
from dprobe.streams.plan_order import PlanOrder
from dprobe.streams.planning import Planning
from dprobe.streams.planning_store import PlanningStore
from dprobe.streams.quiet_sources import quiet_taken_over
from dprobe.streams.ranked_table import add_ranked_table
from dprobe.streams.recovery import SeekFirstTableManager
from dprobe.streams.stall_clock import StallClockConsumer
from dprobe.streams.state.window_agg import WindowSettings
from dprobe.streams.topics import TopicNames
from dprobe.streams.windows import Windows

log = logging.getLogger(__name__)


class WorkerConsumer(StallClockConsumer, EagerConsumer, FetchGuardConsumer):
    """The worker's Kafka consumer: faust's, with eager delivery
    (:mod:`~dprobe.streams.eager_delivery`), guarded fetches
    (:mod:`~dprobe.streams.fetch_guard`) and stall checks counted from the last rebalance
    (:mod:`~dprobe.streams.stall_clock`)."""


def broker_credentials(k: KafkaSettings) -> Any:
    """faust credentials for the configured SASL/SSL settings (``None`` for PLAINTEXT)."""
    if k.security_protocol == "PLAINTEXT":
        return None
    ssl_ctx = k.ssl_context() if k.security_protocol in {"SSL", "SASL_SSL"} else None
    if k.security_protocol.startswith("SASL"):
        return faust.SASLCredentials(
            username=k.sasl_username,
            password=k.sasl_password.get() if k.sasl_password else None,
            mechanism=k.sasl_mechanism,
            ssl_context=ssl_ctx,
        )
    return faust.SSLCredentials(ssl_ctx)


def event_producer(s: WorkerSettings) -> Any:
    """Planning's producer of scaling events (:mod:`dprobe.streams.event_fence`): with
    ``fence_events``, transactional, with the group's ``transactional.id``, so starting it
    fences earlier owners."""
    from aiokafka import AIOKafkaProducer

    return AIOKafkaProducer(
        **s.kafka.client_kwargs(),
        transactional_id=transactional_id(s.app_id) if s.fence_events else None,
        enable_idempotence=True,
        acks="all",
        compression_type="lz4",
    )


def forecaster(s: WorkerSettings) -> Any:
    """The worker's forecaster: ``s.model``, its p90 calibrated online at the planning lead
    (and the lend horizon) unless ``s.calibrate`` is off
    (:mod:`dprobe.models.forecast.calibration`), each tenant's forecasts replaced by its
    demand now while they have not been paying unless ``s.forecast_gate`` is off
    (:mod:`dprobe.models.forecast.gate`)."""
    lead = s.plan_lead_s
    horizons = tuple(sorted({lead, *([s.lend_horizon_s] if s.lend_horizon_s > 0 else [])}))
    return make_forecaster(
        s.model,
        seed=s.seed,
        calibrate=s.calibrate,
        calibration={"horizons_s": horizons},
        gate=s.forecast_gate,
        gating={"horizon_s": lead, "level": 0.9 if s.plan_quantile == "p90" else 0.5},
    )


@dataclass
class WorkerApp:
    """The app and the handles tests and the exporter need."""

    app: faust.App
    topics: TopicNames
    stats: WorkerStats
    settings: WorkerSettings


def window_settings(s: WorkerSettings) -> WindowSettings:
    return WindowSettings(
        window_s=s.window_s,
        grace_s=s.grace_s,
        source_idle_s=s.source_idle_s,
        host_shards=s.window_host_shards,
        book_shards=s.job_book_shards,
        index_shards=s.tenant_index_shards,
        max_state_bytes=s.max_state_bytes,
        levels=demand_settings.level_settings(s),
        flow=demand_settings.flow_settings(s),
        # older windows the planner would not learn (its tenant forgotten at once)
        job_fill_s=s.forget_tenant_after_s or WindowSettings.job_fill_s,
    )


def plan_settings(s: WorkerSettings) -> PlanLoopSettings:
    return PlanLoopSettings(
        capacity_gpus=s.capacity_gpus,
        horizon_s=s.plan_lead_s,
        hold_s=s.lend_horizon_s,
        guaranteed_gpus=s.guaranteed_gpus,
        forget_after_s=s.forget_tenant_after_s,
        planner=planner_settings_of(s),
    )


def build_app(s: WorkerSettings, *, samples_partitions: int | None = None) -> WorkerApp:
    """Create the faust app with its topics, tables and agents.

    ``samples_partitions`` must equal the partition count of the existing samples topic
    (the host table is co-partitioned with it); ``None`` means ``s.partitions``.
    """
    names = TopicNames.from_settings(s)
    k = s.kafka
    app = faust.App(
        s.app_id,
        broker=[f"kafka://{h.strip()}" for h in k.bootstrap.split(",")],
        broker_credentials=broker_credentials(k),
        broker_client_id=k.client_id,
        store="memory://",
        topic_partitions=s.partitions,
        topic_replication_factor=s.replication_factor,
        processing_guarantee="at_least_once",
        producer_acks=-1,
        producer_compression_type="lz4",
        producer_linger=s.producer_linger_ms / 1000.0,
        producer_max_batch_size=1 << 20,
        consumer_auto_offset_reset="earliest",
        consumer_max_fetch_size=s.fetch_partition_bytes,
        web_enabled=False,
        datadir=str(s.data_dir),
        table_standby_replicas=0,
        broker_commit_interval=s.commit_interval_s,
        broker_session_timeout=s.session_timeout_s,
        broker_heartbeat_interval=min(3.0, s.session_timeout_s / 3),  # Kafka's advice: <= 1/3
        key_serializer="raw",
        value_serializer="raw",
        TableManager=SeekFirstTableManager,  # no source record flows before the seek
    )
    # one record's delivery without four tasks, and no fetched record lost in a rebalance
    # (this app's transport only)
    app.transport.Consumer = WorkerConsumer  # type: ignore[misc]
    # faust's producer buffer holds 100 pending sends by default and throttles the agents in
    # 0.1 s sleeps once it is full; a changelog-heavy pipeline needs a deeper buffer.
    app.producer.buffer.max_messages = s.producer_buffer_messages
    stats = WorkerStats()
    cfg = window_settings(s)
    n_samples = samples_partitions or s.partitions

    def raw_topic(name: str, **kw: Any) -> Any:
        return app.topic(name, key_type=bytes, value_type=bytes, **kw)

    samples = raw_topic(names.samples, partitions=n_samples)
    jobs = raw_topic(names.jobs)
    updates = raw_topic(names.updates, partitions=s.partitions, internal=True)
    features = raw_topic(names.features, partitions=s.partitions)
    deadletter = raw_topic(names.deadletter)
    cluster = raw_topic(names.cluster, partitions=1)

    # bytes keys and values: faust then (de)serializes the changelog as raw bytes.
    # host sequence states, and the window, job book and partition states of
    # streams/windows.py: restored so that a stalled former owner's late write of an older
    # state cannot win (streams/ranked_table.py)
    hosts_table = add_ranked_table(app, "hosts", partitions=n_samples)
    window_table = add_ranked_table(app, "windows", partitions=s.partitions)
    deadletters = DeadLetters(deadletter, stats)
    ingest = Ingest(
        hosts_table=hosts_table,
        updates_topic=updates,
        deadletter=deadletters,
        window=cfg,
        stats=stats,
        max_message_bytes=s.max_message_bytes,
        update_partitions=s.partitions,
        max_clock_skew_s=s.max_clock_skew_s,
        quiet_probe=lambda partitions: quiet_taken_over(
            app.consumer, names.samples, partitions, s.source_idle_s
        ),
    )
    planning_topic = raw_topic(names.planning, partitions=1, internal=True)
    scaling_events = FencedEvents(
        lambda: event_producer(s), names.scaling_events, transactional=s.fence_events
    )

    async def forward(window: schema.TenantWindow) -> Any:
        return await planning_topic.send(key=b"plan", value=codec.encode_plan_window(window))

    async def cluster_report(raw: bytes | None, message: Any) -> None:
        """A scheduler's report: invalid ones to the dead-letter topic, valid ones on to the
        planner through the planning topic (in one order with the windows); returns once
        delivered. A tombstone (no value) retires a source's reports from the compacted
        topic; it says nothing of the fleet, so the planner keeps what it was told."""
        if raw is None and getattr(message, "key", None) is not None:
            log.info(
                "cluster report tombstone %s ignored: a source retired (the planner keeps "
                "what it was told)",
                where(message),
            )
            return
        try:
            report = schema.decode_cluster_report(raw, max_bytes=s.max_message_bytes)
        except schema.SchemaError as exc:
            await deadletters.send(raw, exc, message)
            return
        fut = await planning_topic.send(key=b"plan", value=codec.encode_cluster(report))
        await delivered([fut], f"cluster report {where(message)}")

    async def progress(partition: int, upto: float) -> None:
        value = codec.encode_progress(codec.WindowProgress(partition=partition, upto=upto))
        fut = await planning_topic.send(key=b"plan", value=value)
        await delivered([fut], f"progress of window partition {partition}")

    windows = Windows(
        table=window_table,
        features_topic=features,
        window=cfg,
        stats=stats,
        sources=n_samples,
        deadletter=deadletters,
        on_window=forward,
        on_progress=progress,
        level_of=demand_settings.job_level_of(s),
    )
    planning_table = app.Table("planning", partitions=1, key_type=bytes, value_type=bytes)
    planning = Planning(
        make_order=lambda: PlanOrder(PlanLoop(forecaster(s), plan_settings(s)), s.partitions),
        store=PlanningStore(planning_table, chunk_bytes=s.max_state_bytes),
        events=scaling_events,
        stats=stats,
        legacy_checkpoint=Path(s.data_dir) / "plan-loop.ckpt",
        checkpoint_s=s.planning_checkpoint_s,
    )

    def holds_planning(args: tuple[Any, ...]) -> bool:
        """Whether a rebalance signal's partitions (its first argument) include planning."""
        return any(tp.topic == names.planning for tp in (args[0] if args else ()))

    @app.on_before_shutdown.connect
    async def close_event_producer(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        await scaling_events.close()

    # A rebalance revokes every partition first (even those that stay), then assigns.
    @app.on_partitions_revoked.connect
    def planning_revoked(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        """Planning state is loaded again from the table at the next planning record."""
        if holds_planning(args):
            planning.revoke()

    @app.on_partitions_assigned.connect
    def planning_assigned(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        """Planning went to another worker: drop this worker's copy of its state."""
        if not holds_planning(args):
            planning.released()

    @app.on_partitions_revoked.connect
    def nothing_held(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        stats.assigned = frozenset()  # until the rebalance assigns again

    @app.on_partitions_assigned.connect
    def held_now(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        """What this worker holds: its lag series are those partitions'."""
        stats.assigned = frozenset((tp.topic, tp.partition) for tp in app.consumer.assignment())

    async def guarded(handler: Any, event: Any) -> None:
        """Run one record's handler; a bug never stalls the partition: the record goes
        to the dead-letter topic with reason ``processing_error`` and the stream moves on."""
        try:
            await handler(event)
        except (asyncio.CancelledError, DeliveryFailed):
            raise
        except Exception as exc:  # noqa: BLE001 - logged with its traceback there
            await deadletters.processing_error(event.value, exc, event.message)

    async def fatal(handler: Any, batch: Any) -> None:
        """Run one batch. A batch that fails as a whole (the broker refuses or times out a
        delivery) ends the process at once: faust would acknowledge the batch while
        unwinding, committing records whose results never left. A supervisor restarts
        the worker, which resumes from the last commit."""
        try:
            await handler(batch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.critical("a batch or record failed; exiting without committing it", exc_info=True)
            logging.shutdown()
            os._exit(70)

    @app.agent(samples, name="ingest")
    async def ingest_agent(stream: Any) -> None:
        async for batch in stream.take_events(s.batch_max, within=s.batch_within_s):
            await fatal(ingest.submit_held, batch)  # acknowledged once its outputs left

    @app.agent(jobs, name="jobs")
    async def jobs_agent(stream: Any) -> None:
        async for batch in stream.take_events(s.batch_max, within=s.batch_within_s):
            await fatal(ingest.on_job_events, batch)  # acknowledged once its outputs left

    @app.agent(cluster, name="cluster")
    async def cluster_agent(stream: Any) -> None:
        async for event in stream.events():
            # a report not delivered (or a dead letter not sent) ends the process unacked
            await fatal(lambda e: guarded(lambda r: cluster_report(r.value, r.message), e), event)

    @app.agent(updates, name="windows")
    async def windows_agent(stream: Any) -> None:
        async for batch in stream.take_events(s.batch_max, within=s.batch_within_s):
            await fatal(windows.on_updates, batch)

    @app.agent(planning_topic, name="planning")
    async def planning_agent(stream: Any) -> None:
        async def plan(e: Any) -> None:
            await planning.on_message(e.value, e.message.offset)

        async for event in stream.events():
            # an output not delivered (or a dead letter not sent) ends the process unacked
            await fatal(lambda e: guarded(plan, e), event)

    @app.timer(interval=1.0)  # idleness is told within a second of source_idle_s
    async def idle_sources() -> None:
        assigned = {
            tp.partition: app.consumer.highwater(tp)
            for tp in app.consumer.assignment()
            if tp.topic == names.samples
        }
        flowing = not (app.rebalancing or app.in_recovery)
        await ingest.report_idle_sources(assigned, windows.newest_source_ts, flowing=flowing)

    @app.timer(interval=REMARK_S)
    async def remark_settings() -> None:
        # the mark of this worker's window settings, left again for the workers that join
        # later to compare theirs with (a rolling change of the config file is warned of)
        await announce_window(s, names.planning, joined=True)

    return WorkerApp(app=app, topics=names, stats=stats, settings=s)
