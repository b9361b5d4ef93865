"""What dashboards alert and autoscale on: consumer lag per group and topic, messages per topic,
consume latency, and who is running (build info).

Figures are read when Prometheus scrapes, from the consume queues' offsets and the groups'
committed offsets; nothing is added to the produce path. Per-topic put rates come from
`rate(twinlog_topic_messages_total[1m])` (the queues' max offsets only grow on a master), per
group consume rates from `rate(twinlog_consumer_offset_total[1m])`.

Label cardinality is bounded: each family carries at most SERIES_MAX label sets (topics,
or group and topic pairs, in name order); the rest are left out and counted in
`twinlog_metrics_series_dropped`, so a broker with ten thousand topics cannot blow up a
Prometheus server.
"""

from __future__ import annotations

import importlib.metadata
import platform
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from app.api.lag import queue_lag
from app.api.latency import LatencyHistogram

if TYPE_CHECKING:
    from app.broker.broker import Broker

SERIES_MAX = 1000  # label sets per metric family
DELIVERY_DELAY_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0,
                            3600.0)


def build_version() -> str:
    try:
        return importlib.metadata.version("twinlog")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class ConsumeStats:
    """Consume-side figures, observed from the request threads (hence the lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.latency = LatencyHistogram()
        self.delivery_delay = LatencyHistogram(DELIVERY_DELAY_BUCKETS_S)
        self.messages: Counter[str] = Counter()  # by topic, at most SERIES_MAX topics

    def observe(self, topic: str, latency_s: float, store_timestamps_ms: list[int]) -> None:
        """One consume request: its latency, and per message returned how long after its
        store time it was delivered."""
        now_ms = time.time() * 1000
        with self._lock:
            self.latency.observe(latency_s)
            self.delivery_delay.observe_delays(now_ms, store_timestamps_ms)
            if store_timestamps_ms and (topic in self.messages
                                        or len(self.messages) < SERIES_MAX):
                self.messages[topic] += len(store_timestamps_ms)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            latency = HistogramMetricFamily(
                "twinlog_consume_latency_seconds", "Consume request latency")
            latency.add_metric([], self.latency.cumulative_buckets(), self.latency.sum_s)
            delay = HistogramMetricFamily(
                "twinlog_consume_delivery_delay_seconds",
                "Per message consumed: from its store time to its delivery")
            delay.add_metric([], self.delivery_delay.cumulative_buckets(),
                             self.delivery_delay.sum_s)
            consumed = CounterMetricFamily("twinlog_topic_consumed_messages",
                                           "Messages returned by consume requests, by topic",
                                           labels=["topic"])
            for topic, count in sorted(self.messages.items()):
                consumed.add_metric([topic], count)
        yield latency
        yield delay
        yield consumed


class UsageCollector(Collector):
    def __init__(self, broker: Callable[[], Broker | None], consume: ConsumeStats) -> None:
        self._broker = broker
        self._consume = consume

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("twinlog_build_info", "The running twinlog (always 1)",
                                 labels=["version", "python"])
        info.add_metric([build_version(), platform.python_version()], 1)
        yield info
        yield from self._consume.collect()
        broker = self._broker()
        if broker is None or not broker.is_running:
            return
        dropped = 0
        messages, dropped_topics = _topic_messages(broker)
        yield messages
        lag, offsets, dropped_pairs = _consumer_lag(broker)
        yield lag
        yield offsets
        dropped += dropped_topics + dropped_pairs
        yield GaugeMetricFamily("twinlog_metrics_series_dropped",
                                f"Label sets left out past {SERIES_MAX} per family",
                                value=dropped)


def _queue_bounds(broker: Broker, topic: str, queue_ids: list[int]) -> list[tuple[int, int]]:
    bounds = []
    for queue_id in queue_ids:
        found = broker.store.queue_offset_range(topic, queue_id)
        bounds.append(found if found is not None else (0, 0))
    return bounds


def _topic_messages(broker: Broker) -> tuple[Metric, int]:
    family = CounterMetricFamily("twinlog_topic_messages",
                                 "Messages stored in a topic's queues (their max offsets)",
                                 labels=["topic"])
    topics = broker.store.queues.topics()
    for topic in list(topics)[:SERIES_MAX]:
        family.add_metric([topic], sum(high for _, high in
                                       _queue_bounds(broker, topic, topics[topic])))
    return family, max(0, len(topics) - SERIES_MAX)


def _consumer_lag(broker: Broker) -> tuple[Metric, Metric, int]:
    """Lag per group and topic, as GET /v1/groups/{group}/lag computes it: every queue of a
    topic the group committed to, a queue without a commit counting from its min offset."""
    lag = GaugeMetricFamily("twinlog_consumer_lag_messages",
                            "Messages not yet consumed by a group, per topic",
                            labels=["group", "topic"])
    offsets = CounterMetricFamily("twinlog_consumer_offset",
                                  "Sum of a group's committed offsets on a topic's queues",
                                  labels=["group", "topic"])
    committed: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
    for offset in broker.metadata_store.list_consumer_offsets():
        committed[(offset.group_name, offset.topic)][offset.queue_id] = offset.queue_offset
    queues_of = broker.store.queues.topics()
    pairs = sorted(committed)
    for group, topic in pairs[:SERIES_MAX]:
        by_queue = committed[(group, topic)]
        queue_ids = sorted(set(queues_of.get(topic, [])) | set(by_queue))
        total = 0
        for queue_id, (low, high) in zip(queue_ids, _queue_bounds(broker, topic, queue_ids),
                                         strict=True):
            total += queue_lag(low, high, by_queue.get(queue_id))
        lag.add_metric([group, topic], total)
        offsets.add_metric([group, topic], sum(by_queue.values()))
    return lag, offsets, max(0, len(pairs) - SERIES_MAX)
