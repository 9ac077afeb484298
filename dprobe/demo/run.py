"""The orchestration of ``dprobe demo``: topics, worker, collectors, watching, summary.

Order of a run (every step undone in reverse on the way out, also on Ctrl-C or a failure):

1. create the run's topics (fresh prefix) and start a ``dprobe worker`` subprocess;
2. read ``<prefix>features`` and ``<prefix>scaling-events`` from the beginning (events
   are printed as they arrive, one line each, as ``dprobe events`` prints them) and
   measure the worker group's consumer lag;
3. once the worker's consumer group is stable, run one synthetic collector per host,
   in this process, on one shared accelerated clock (so every host is at the same event
   time), for ``plan.duration_s`` wall seconds, scraping the worker's ``/metrics``;
4. stop the collectors (they flush), let the worker catch up, stop it, delete the run's
   topics unless told to keep them.

Example:
    >>> demo = Demo(DemoPlan(duration_s=40), KafkaSettings(), out_dir=Path("out"))
    >>> outcome = asyncio.run(demo.run())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dprobe.config import CollectorSettings, KafkaSettings, WorkerSettings
from dprobe.count_text import count_of
from dprobe.demo.plan import MEAN_JOB_S, DemoPlan, clock_start
from dprobe.demo.processes import WORKER_METRICS_PORT, WorkerProcess, free_port
from dprobe.demo.record import Recording
from dprobe.demo.scrape import fetch, parse_metrics
from dprobe.errors import DprobeError
from dprobe.event_line import format_line
from dprobe.lifecycle import cancel_and_wait

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 180.0  # a cold worker imports faust and torch: slow on small machines
DRAIN_TIMEOUT_S = 20.0
SCRAPE_EVERY_S = 0.5
PROGRESS_EVERY_S = 15.0
SOURCE_IDLE_S = 2.0  # wall seconds before an empty samples partition stops holding windows


class DemoFailed(DprobeError):
    """A part of the demo failed; the message says which and carries its log tail."""


@dataclass
class Outcome:
    """What a finished (or interrupted) run leaves for the summary."""

    recording: Recording
    snapshots: int
    interrupted: bool
    metrics_url: str
    metrics_seen: bool


class Demo:
    """One demo run against the Kafka of ``kafka`` (its ``topic_prefix`` is replaced)."""

    def __init__(
        self,
        plan: DemoPlan,
        kafka: KafkaSettings,
        *,
        out_dir: Path,
        config_file: str | None = None,
        keep_topics: bool = False,
        worker_log_level: str = "WARNING",
        metrics_port: int = WORKER_METRICS_PORT,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.plan = plan
        self.kafka = dataclasses.replace(kafka, topic_prefix=plan.topic_prefix)
        self.out_dir = out_dir
        self.config_file = config_file
        self.keep_topics = keep_topics
        self.worker_log_level = worker_log_level
        self.say = say or (lambda line: print(f"dprobe demo: {line}", file=sys.stderr, flush=True))
        self.rec = Recording()
        # the configured worker.metrics_port when it is free, else any free port
        self.metrics_port = free_port(metrics_port)
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        self.metrics_seen = False
        self.invalid = 0
        self._interrupted: asyncio.Event | None = None

    # the worker ----------------------------------------------------------------------
    def worker_settings(self, data_dir: Path) -> WorkerSettings:
        return WorkerSettings(
            kafka=self.kafka,
            app_id=self.plan.app_id,
            window_s=self.plan.window_s,
            grace_s=self.plan.grace_s,
            data_dir=data_dir,
        )

    def worker_process(self, data_dir: Path) -> WorkerProcess:
        args = ["--bootstrap", self.kafka.bootstrap, "--log-level", self.worker_log_level]
        if self.config_file:
            args += ["--config", self.config_file]
        args += [
            "worker",
            "--app-id", self.plan.app_id,
            "--window", f"{self.plan.window_s:g}",
            "--grace", f"{self.plan.grace_s:g}",
            "--data-dir", str(data_dir),
        ]  # fmt: skip
        env = {
            "DPROBE_KAFKA_TOPIC_PREFIX": self.plan.topic_prefix,
            "DPROBE_WORKER_METRICS_ADDR": "127.0.0.1",
            "DPROBE_WORKER_METRICS_PORT": str(self.metrics_port),
            "DPROBE_WORKER_SOURCE_IDLE_S": f"{SOURCE_IDLE_S:g}",
            # the planner shares out the demo's GPUs, moved in whole hosts
            "DPROBE_WORKER_CAPACITY_GPUS": str(self.plan.hosts * self.plan.gpus_per_host),
            "DPROBE_WORKER_NODE_GPUS": str(self.plan.gpus_per_host),
        }
        return WorkerProcess(args, env, self.out_dir / "worker.log")

    # the run -------------------------------------------------------------------------
    async def run(self) -> Outcome:
        """Run to the end (or to Ctrl-C / SIGTERM); raises :class:`DemoFailed`."""
        from dprobe.sinks.consumer_lag import ConsumerLag
        from dprobe.streams.provision import ensure_topics
        from dprobe.streams.topics import TopicNames

        loop = asyncio.get_running_loop()
        self._interrupted = asyncio.Event()
        # put back afterwards: the caller's own (SIGTERM as Ctrl-C while a broker stops)
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in before:
            loop.add_signal_handler(sig, self._interrupted.set)
        collectors: list[Any] = []
        reader: asyncio.Task[None] | None = None
        lag: ConsumerLag | None = None
        worker: WorkerProcess | None = None
        with tempfile.TemporaryDirectory(prefix="dprobe-demo-") as tmp:
            settings = self.worker_settings(Path(tmp) / "worker")
            names = TopicNames.from_settings(settings)
            try:
                await ensure_topics(settings)
                worker = self.worker_process(Path(tmp) / "worker")
                worker.start()
                self.say(
                    f"worker started (pid {worker.proc.pid if worker.proc else '?'}, log "
                    f"{worker.log}); /metrics at {self.metrics_url}"
                )
                lag = ConsumerLag(
                    self.kafka,
                    self.plan.app_id,
                    [names.samples, names.jobs],  # the worker group's inputs
                    interval_s=1.0,
                )
                await lag.start()
                await self._wait_ready(worker)
                # read from the beginning, so starting once the topics have settled loses nothing
                reader = asyncio.create_task(self._read(names), name="dprobe-demo-reader")
                if not self.interrupted:
                    collectors = await self._start_collectors(Path(tmp))
                    await self._watch(worker, lag, reader, self.plan.duration_s)
                await self._stop_collectors(collectors)
                snapshots = sum(c.ticks for c in collectors)
                if not self.interrupted:
                    await self._drain(worker, lag, reader)
                return Outcome(
                    recording=self.rec,
                    snapshots=snapshots,
                    interrupted=self.interrupted,
                    metrics_url=self.metrics_url,
                    metrics_seen=self.metrics_seen,
                )
            finally:
                await self._stop_collectors(collectors)
                if worker is not None:
                    await asyncio.to_thread(worker.stop)
                if reader is not None:
                    # a reader that failed already raised in _watch
                    with contextlib.suppress(Exception):
                        await cancel_and_wait(reader)
                if lag is not None:
                    await lag.stop()
                if not self.keep_topics:
                    await self._delete_topics()
                for sig, handler in before.items():
                    loop.remove_signal_handler(sig)
                    if handler is not None:
                        signal.signal(sig, handler)

    @property
    def interrupted(self) -> bool:
        return self._interrupted is not None and self._interrupted.is_set()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when interrupted."""
        assert self._interrupted is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._interrupted.wait(), timeout=seconds)

    def _check_worker(self, worker: WorkerProcess) -> None:
        if not worker.alive and not self.interrupted:
            raise DemoFailed(
                f"the worker exited ({worker.describe_exit()}); last lines of "
                f"{worker.log}:\n{worker.tail()}"
            )

    async def _wait_ready(self, worker: WorkerProcess) -> None:
        """Until the worker's consumer group is stable (it then reads every partition)."""
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.errors import KafkaError

        t0 = time.monotonic()
        admin = AIOKafkaAdminClient(**self.kafka.client_kwargs())
        await admin.start()
        try:
            while not self.interrupted:
                self._check_worker(worker)
                try:
                    described = await admin.describe_consumer_groups([self.plan.app_id])
                    groups = [g for resp in described for g in resp.to_object()["groups"]]
                except KafkaError as exc:
                    log.debug("describing the worker group failed: %r", exc)
                    groups = []
                if any(g["state"] == "Stable" and g["members"] for g in groups):
                    self.say(f"worker ready after {time.monotonic() - t0:.0f} s")
                    return
                if time.monotonic() - t0 > READY_TIMEOUT_S:
                    raise DemoFailed(
                        f"the worker did not join its consumer group within "
                        f"{READY_TIMEOUT_S:.0f} s; last lines of {worker.log}:\n{worker.tail()}"
                    )
                await self._pause(0.5)
        finally:
            await admin.close()

    async def _start_collectors(self, tmp: Path) -> list[Any]:
        """One in-process synthetic collector per host, all on one accelerated clock."""
        from prometheus_client import CollectorRegistry

        from dprobe.clock import AcceleratedClock
        from dprobe.collectors.assemble import build_collector, tenant_names
        from dprobe.collectors.synthetic import SyntheticBackend

        p = self.plan
        start = clock_start(datetime.now(UTC), p.event_span_s)
        clock = AcceleratedClock(speed=p.speed, start=start)
        tenants = tenant_names(p.tenants)
        collectors = []
        for i in range(p.hosts):
            host = f"demo-node-{i + 1:02d}"
            s = CollectorSettings(
                kafka=self.kafka,
                backend="synthetic",
                interval_s=p.interval_s,
                host_id=host,
                spool_dir=tmp / "spool",
                state_dir=tmp / "state",
                spool_fsync=False,
                clock_speed=p.speed,
                tenants=p.tenants,
                synthetic_gpus=p.gpus_per_host,
                seed=i,
            )
            backend = SyntheticBackend(
                host=host, tenants=tenants, gpus=p.gpus_per_host, seed=i, clock=clock,
                mean_job_s=MEAN_JOB_S,
            )  # fmt: skip
            collectors.append(build_collector(s, registry=CollectorRegistry(), clock=clock,
                                              backend=backend))  # fmt: skip
        for c in collectors:
            await c.start()
        when = datetime.fromtimestamp(start, UTC).strftime("%a %Y-%m-%d %H:%M UTC")
        self.say(
            f"{count_of(p.hosts, 'synthetic host')} x {p.gpus_per_host} GPUs, "
            f"tenants {', '.join(tenants)}; "
            f"event time starts {when} and runs {p.speed:g}x faster than the wall clock "
            f"({p.event_span_s / 3600:.1f} h in {p.duration_s:g} s, {p.window_s / 60:g}-minute "
            f"windows)"
        )
        return collectors

    async def _stop_collectors(self, collectors: list[Any]) -> None:
        for c in collectors:
            await c.stop()

    async def _scrape(self) -> None:
        text = await asyncio.to_thread(fetch, self.metrics_url, 1.0)
        if text is None:
            return
        scrape = parse_metrics(text)
        if not self.metrics_seen:
            self.metrics_seen = True
            self.say(f"worker /metrics answering at {self.metrics_url}")
        self.rec.add_scrape(scrape)

    def _record_lag(self, lag: Any) -> float | None:
        if lag.updated_at is None:
            return None
        total = float(sum(lag.lags.values()))
        self.rec.add_lag(time.time(), total)
        return total

    async def _watch(self, worker: WorkerProcess, lag: Any, reader: asyncio.Task[None],
                     seconds: float) -> None:  # fmt: skip
        """Scrape and check every part until ``seconds`` have passed or Ctrl-C."""
        t0 = time.monotonic()
        next_progress = t0 + PROGRESS_EVERY_S
        while not self.interrupted and time.monotonic() - t0 < seconds:
            self._check_worker(worker)
            if reader.done():
                reader.result()  # raises what ended it
                raise DemoFailed("the topic reader stopped")
            await self._scrape()
            current = self._record_lag(lag)
            if time.monotonic() >= next_progress:
                next_progress += PROGRESS_EVERY_S
                self.say(self._progress(current))
            await self._pause(SCRAPE_EVERY_S)

    def _progress(self, lag: float | None) -> str:
        ends = [max(by_end) for by_end in self.rec.demand.values() if by_end]
        reached = datetime.fromtimestamp(max(ends), UTC).strftime("%a %H:%M UTC") if ends else "-"
        lag_text = "?" if lag is None else f"{lag:.0f}"
        return (
            f"windows closed up to {reached}: {self.rec.windows} TenantWindows, "
            f"{len(self.rec.events)} scaling events, consumer lag {lag_text}"
        )

    async def _drain(self, worker: WorkerProcess, lag: Any, reader: asyncio.Task[None]) -> None:
        """After the collectors stopped: wait until the worker has read everything."""
        t0 = time.time()
        current = None
        while not self.interrupted and time.time() - t0 < DRAIN_TIMEOUT_S:
            self._check_worker(worker)
            if lag.updated_at is not None and lag.updated_at > t0:
                current = self._record_lag(lag)
                if current == 0:
                    break
            await self._pause(0.25)
        if current == 0:
            self.say(f"the worker caught up {time.time() - t0:.1f} s after the collectors stopped")
        else:
            self.say(f"the worker still lagged after {DRAIN_TIMEOUT_S:.0f} s; stopping it")
        await self._pause(1.5)  # the last windows and events on their way to the reader
        await self._scrape()

    async def _read(self, names: Any) -> None:
        """Record every TenantWindow and print every new ScalingEvent."""
        from aiokafka import AIOKafkaConsumer

        from dprobe.schema import SchemaError, decode_scaling_event, decode_window

        consumer = AIOKafkaConsumer(
            names.features,
            names.scaling_events,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",  # scaling events: committed transactions only
            **self.kafka.client_kwargs(),
        )
        await consumer.start()
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=200)
                for tp, records in batch.items():
                    for r in records:
                        try:
                            if tp.topic == names.features:
                                self.rec.add_window(decode_window(r.value))
                                continue
                            ev = decode_scaling_event(r.value)
                        except SchemaError as exc:
                            self.invalid += 1
                            log.warning("skipping %s[%d]@%d: %s", tp.topic, tp.partition,
                                        r.offset, exc)  # fmt: skip
                            continue
                        if self.rec.add_event(ev):
                            print(format_line(ev), flush=True)
        finally:
            await consumer.stop()

    async def _delete_topics(self) -> None:
        """Delete this run's topics (external ones and the worker's internal ones)."""
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.errors import KafkaError

        admin = AIOKafkaAdminClient(**self.kafka.client_kwargs())
        try:
            await admin.start()
            mine = [
                t
                for t in await admin.list_topics()
                if t.startswith((self.plan.topic_prefix, self.plan.app_id))
            ]
            if mine:
                await admin.delete_topics(mine)
        except KafkaError as exc:
            log.warning("could not delete the demo's topics: %r", exc)
        finally:
            await admin.close()
