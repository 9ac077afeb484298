"""``dprobe lag``: consumer-group lag read from Kafka's admin API, whoever is running.

A worker that stops cannot report its own lag, and lag is what tells an operator (or an
autoscaler such as KEDA's Prometheus scaler) that workers are missing. This exporter
polls, for each watched group, the committed offsets, the log-end offsets and the
group's members (one :class:`~dprobe.sinks.consumer_lag.ConsumerLag` per group), and
serves them with kafka_exporter's names, so dashboards and alerts written for
kafka_exporter work unchanged:

- ``kafka_consumergroup_lag{consumergroup,topic,partition}``: end offset minus committed
  offset (a partition never committed: minus its beginning offset);
- ``kafka_consumergroup_lag_sum{consumergroup,topic}``;
- ``kafka_consumergroup_current_offset{consumergroup,topic,partition}`` (committed);
- ``kafka_topic_partition_current_offset{topic,partition}`` (log end);
- ``kafka_topic_partitions{topic}`` (how many partitions a watched topic has: the most
  consumers of a group that get work);
- ``kafka_consumergroup_members{consumergroup}`` (0: no consumer of the group runs);
- ``dprobe_lag_refresh_errors_total{consumergroup}`` and
  ``dprobe_lag_last_refresh_timestamp_seconds{consumergroup}`` (how fresh the values are).

A scrape only reads the latest values; it never talks to Kafka. Without configured
topics a group's topics are those it has committed offsets on.

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> from dprobe.config import KafkaSettings
    >>> poller = ConsumerLag(KafkaSettings(), "dprobe-worker", ["dprobe.samples"])
    >>> poller.lags, poller.members = {("dprobe.samples", 0): 7}, 0
    >>> reg = CollectorRegistry()
    >>> _ = LagCollector([poller], registry=reg)
    >>> reg.get_sample_value("kafka_consumergroup_lag_sum",
    ...                      {"consumergroup": "dprobe-worker", "topic": "dprobe.samples"})
    7
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dprobe.config import LagSettings
from dprobe.lifecycle import AsyncService
from dprobe.sinks.consumer_lag import ConsumerLag


class LagCollector(Collector):
    """Prometheus collector over the latest values of several :class:`ConsumerLag`."""

    def __init__(
        self, pollers: Sequence[ConsumerLag], *, registry: CollectorRegistry | None = None
    ) -> None:
        self.pollers = list(pollers)
        if registry is not None:
            registry.register(self)

    def collect(self) -> Iterator[Metric]:
        group_labels = ["consumergroup", "topic", "partition"]
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag", "End offset minus committed offset", labels=group_labels
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "Lag of the group summed over a topic's partitions",
            labels=["consumergroup", "topic"],
        )
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "Committed offset", labels=group_labels
        )
        ends = GaugeMetricFamily(
            "kafka_topic_partition_current_offset",
            "Log-end offset of a partition",
            labels=["topic", "partition"],
        )
        counts = GaugeMetricFamily(
            "kafka_topic_partitions", "Number of partitions of a topic", labels=["topic"]
        )
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of the group", labels=["consumergroup"]
        )
        errors = CounterMetricFamily(
            "dprobe_lag_refresh_errors",
            "Refreshes that failed (the values are then from the last success)",
            labels=["consumergroup"],
        )
        fresh = GaugeMetricFamily(
            "dprobe_lag_last_refresh_timestamp_seconds",
            "Unix time of the last successful refresh",
            labels=["consumergroup"],
        )
        seen_ends: set[tuple[str, int]] = set()
        for p in self.pollers:
            g = p.group
            sums: dict[str, int] = {}
            for (topic, partition), value in sorted(dict(p.lags).items()):
                lag.add_metric([g, topic, str(partition)], value)
                sums[topic] = sums.get(topic, 0) + value
            for topic, value in sorted(sums.items()):
                lag_sum.add_metric([g, topic], value)
            for (topic, partition), offset in sorted(dict(p.committed).items()):
                current.add_metric([g, topic, str(partition)], offset)
            for (topic, partition), end in sorted(dict(p.ends).items()):
                if (topic, partition) not in seen_ends:
                    seen_ends.add((topic, partition))
                    ends.add_metric([topic, str(partition)], end)
            if p.members is not None:
                members.add_metric([g], p.members)
            errors.add_metric([g], p.errors)
            if p.updated_at is not None:
                fresh.add_metric([g], p.updated_at)
        for topic, n in sorted(Counter(topic for topic, _ in seen_ends).items()):
            counts.add_metric([topic], n)
        yield from (lag, lag_sum, current, ends, counts, members, errors, fresh)


class LagExporter(AsyncService):
    """The pollers of every watched group, registered on ``registry``.

    ``await start()`` starts them (each connects and retries by itself); ``stop()``
    stops them; ``async with`` does both.
    """

    def __init__(self, settings: LagSettings, registry: CollectorRegistry) -> None:
        self.settings = settings
        self.pollers = [
            ConsumerLag(
                settings.kafka, group, settings.topics, interval_s=settings.interval_s, members=True
            )
            for group in settings.groups
        ]
        self.collector = LagCollector(self.pollers, registry=registry)

    async def start(self) -> None:
        for p in self.pollers:
            await p.start()

    async def wait(self) -> None:
        """Return when a poller has ended, raising the unexpected error that ended it
        (pollers otherwise run until stopped: a refresh that fails on Kafka is retried)."""
        if not self.pollers:
            return
        waits = [asyncio.ensure_future(p.wait()) for p in self.pollers]
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        for w in done:
            w.result()

    async def stop(self) -> None:
        for p in self.pollers:
            with contextlib.suppress(Exception):
                await p.stop()
