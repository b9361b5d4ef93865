"""What the lag report and `/metrics` say about group consumption (receive / ack), per group
and topic: messages ready, in flight, retrying, dead-lettered, and the acks counted.

From the queue states the log's pop records built (app/broker/consumption.py), so a slave says
what its master says once it has the same records; read under the consumption lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from app.api.metrics_usage import SERIES_MAX
from app.api.timer_views import lateness_histogram
from store.consumption.names import retry_topic
from store.consumption.records import QueueKey
from store.consumption.registry import RETRY_QUEUE_BIT, is_retry_queue

if TYPE_CHECKING:
    from app.broker.broker import Broker


def _backlog(broker: Broker, topic: str, queue_id: int, scan_offset: int | None) -> int:
    """Messages of a queue not yet taken into the group's window."""
    bounds = broker.store.queue_offset_range(topic, queue_id)
    if bounds is None:
        return 0
    low, high = bounds
    return max(0, high - max(low, scan_offset if scan_offset is not None else low))


def topic_counts(broker: Broker, group: str, topic: str) -> dict[str, Any]:
    """A TopicConsumption document (app/api/schemas/groups.py)."""
    consumption = broker.consumption
    registry = consumption.registry
    config = broker.metadata_store.topic_view(topic)
    read_queues = config.read_queue_count if config is not None else 0
    retry = retry_topic(group, topic)
    ready = in_flight = retrying = 0
    with consumption.state_lock:
        keys = {key.queue_id: key for key in registry.keys_of(group, topic)}
        retry_queues = {queue_id & ~RETRY_QUEUE_BIT for queue_id in keys
                        if is_retry_queue(queue_id)}
        retry_queues |= set(broker.store.queues.topics().get(retry, []))
        for queue_id in [*range(read_queues), *(RETRY_QUEUE_BIT | q for q in retry_queues)]:
            key = keys.get(queue_id, QueueKey(group, topic, queue_id))
            state = registry.state(key)
            counts = registry.queue_counts(key)
            stored = retry if is_retry_queue(queue_id) else topic
            backlog = _backlog(broker, stored, queue_id & ~RETRY_QUEUE_BIT,
                               None if state is None else state.scan_offset)
            in_flight += counts.in_flight
            if is_retry_queue(queue_id):
                retrying += backlog + counts.waiting
            else:
                ready += backlog + counts.waiting - counts.retrying
                retrying += counts.retrying
        totals = registry.counts(group, topic)
        return {"topic": topic, "ready": ready, "in_flight": in_flight, "retrying": retrying,
                "dead_lettered": totals.dead_lettered, "acked": totals.acked}


def group_counts(broker: Broker, group: str, topic: str | None) -> list[dict[str, Any]]:
    registry = broker.consumption.registry
    with broker.consumption.state_lock:
        topics = registry.topics_of(group)
    return [topic_counts(broker, group, name) for name in topics
            if topic is None or name == topic]


def pop_metrics(broker: Broker) -> Iterator[Metric]:
    registry = broker.consumption.registry
    messages = GaugeMetricFamily(
        "twinlog_pop_messages", "Group consumption: messages of a topic for a group, by state "
        "(ready, in_flight, retrying)", labels=["group", "topic", "state"])
    ended = CounterMetricFamily(
        "twinlog_pop_messages_ended", "Group consumption: deliveries ended, by how (acked, "
        "retried, dead_lettered, filtered)", labels=["group", "topic", "outcome"])
    with broker.consumption.state_lock:
        pairs = registry.group_topics()
    # Four label sets a pair at most: the families stay within SERIES_MAX (docs/metrics.md).
    for group, topic in sorted(pairs)[:SERIES_MAX // 4]:
        counts = topic_counts(broker, group, topic)
        for state in ("ready", "in_flight", "retrying"):
            messages.add_metric([group, topic, state], counts[state])
        totals = registry.counts(group, topic)
        for outcome in ("acked", "retried", "dead_lettered", "filtered"):
            ended.add_metric([group, topic, outcome], getattr(totals, outcome))
    yield messages
    yield ended
    batches = broker.pop_batches
    yield CounterMetricFamily(
        "twinlog_pop_decisions", "Group consumption: decisions made for receives and acks "
        "(the requests of one event-loop turn are decided together)", value=batches.batches)
    yield CounterMetricFamily(
        "twinlog_pop_decided_requests", "Group consumption: receives and acks those decisions "
        "answered", value=batches.requests)
    yield CounterMetricFamily(
        "twinlog_pop_stale_applies_skipped", "Group consumption: decisions whose record was "
        "not applied here at once, as the states were rebuilt while it was appended (it "
        "applies as dispatch reaches it, if the log keeps it)",
        value=broker.consumption.stale_applies_skipped)
    yield lateness_histogram(HistogramMetricFamily(
        "twinlog_pop_redelivery_lateness_seconds",
        "Group consumption: when this broker (as master) ended an expired delivery, minus "
        "its invisible time (the message is receivable again from then on)"),
        broker.consumption.expiry_lateness)
