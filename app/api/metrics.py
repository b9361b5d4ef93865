"""Prometheus metrics, one CollectorRegistry per app (two apps in one process never collide).

The hot path only bumps plain integers and observes one histogram; broker figures (offsets,
diffs, connections, dispatch lag) are read when Prometheus scrapes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from app.api.latency import LatencyHistogram
from app.api.metrics_dledger import dledger_metrics
from app.api.metrics_pop import pop_metrics
from app.api.metrics_usage import ConsumeStats, UsageCollector
from app.api.timer_views import timer_metrics
from ha import MasterDiff
from store import MessageStore

if TYPE_CHECKING:
    from app.broker.broker import Broker

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(slots=True)
class RefusalCounts:
    """HTTP connections refused or cut by the protocol's limits (app/server/http_protocol.py)."""

    connections_refused: int = 0
    heads_too_large: int = 0
    head_timeouts: int = 0
    body_timeouts: int = 0
    lingers_cut: int = 0


class Metrics:
    def __init__(self, broker: Callable[[], Broker | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.single_latency = LatencyHistogram()
        self.batch_latency = LatencyHistogram()
        # Puts by status name: PutMessageStatus names, or the gateway's code for a refusal
        # before the store (MALFORMED_JSON, UNAUTHORIZED, ...).
        self.puts: Counter[str] = Counter()
        self.request_bytes_total = 0
        self.http_refusals = RefusalCounts()
        # Set by the server that serves this app (app/server/http_server.py); 0 without one (tests
        # that drive the app in-process).
        self.http_connections_open: Callable[[], int] = lambda: 0
        # Each read worker's counts (app/server/read_workers/pool.py); none without workers.
        self.read_worker_counts: Callable[[], list[dict[str, int]]] = lambda: []
        self.consume = ConsumeStats()
        self.registry.register(_BrokerCollector(self, broker))
        self.registry.register(UsageCollector(broker, self.consume))
        # process_* (CPU seconds, resident memory, open fds) and python_info.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _BrokerCollector(Collector):
    def __init__(self, metrics: Metrics, broker: Callable[[], Broker | None]) -> None:
        self._metrics = metrics
        self._broker = broker

    def collect(self) -> Iterator[Metric]:
        latency = HistogramMetricFamily(
            "twinlog_put_latency_seconds",
            "Produce request latency, from the request to the answer (guarantees included)",
            labels=["kind"])
        for kind, histogram in (("single", self._metrics.single_latency),
                                ("batch", self._metrics.batch_latency)):
            latency.add_metric([kind], histogram.cumulative_buckets(), histogram.sum_s)
        yield latency
        puts = CounterMetricFamily("twinlog_puts", "Messages put, by status", labels=["status"])
        for status, count in sorted(self._metrics.puts.items()):
            puts.add_metric([status], count)
        yield puts
        yield CounterMetricFamily("twinlog_http_produce_request_bytes",
                                  "Produce request body bytes received",
                                  value=self._metrics.request_bytes_total)
        refused = CounterMetricFamily("twinlog_http_connections_cut",
                                      "HTTP connections refused or cut by a limit, by reason",
                                      labels=["reason"])
        for reason, count in asdict(self._metrics.http_refusals).items():
            refused.add_metric([reason], count)
        yield refused
        yield GaugeMetricFamily("twinlog_http_connections_open",
                                "HTTP connections open now (the one scraping included)",
                                value=self._metrics.http_connections_open())
        yield from _read_worker_metrics(self._metrics.read_worker_counts())
        broker = self._broker()
        if broker is None or not broker.is_running:
            return
        store = broker.store
        yield CounterMetricFamily("twinlog_store_put_bytes", "Record bytes appended",
                                  value=broker.put_bytes_total())
        yield GaugeMetricFamily("twinlog_commit_log_max_offset_bytes",
                                "Commit-log max offset", value=store.max_offset)
        yield GaugeMetricFamily("twinlog_commit_log_min_offset_bytes",
                                "Commit-log min offset", value=store.min_offset)
        yield GaugeMetricFamily("twinlog_dispatch_behind_bytes",
                                "Commit-log bytes not yet in the consume queues",
                                value=store.dispatch.behind_bytes)
        failures = store.dispatch.failures
        yield GaugeMetricFamily("twinlog_dispatch_failed_queues",
                                "Consume queues set aside after an I/O error (rebuilt at start)",
                                value=failures.failed_queue_count)
        yield CounterMetricFamily("twinlog_dispatch_errors",
                                  "Consume-queue writes that failed every attempt, and dispatch "
                                  "rounds that failed (a record it cannot read or apply)",
                                  value=failures.error_count + store.dispatch.error_count)
        yield CounterMetricFamily("twinlog_consume_queue_single_entry_reservations",
                                  "Puts that reserved only their own consume-queue entry, "
                                  "because dispatch is a queue file behind (each takes the "
                                  "queue's lock)",
                                  value=store.commit_log.single_entry_reservation_count)
        cache = store.encoded_records
        yield GaugeMetricFamily("twinlog_consume_cache_bytes",
                                "Encoded messages kept for consume answers (bytes, with "
                                "their overhead); at most consume_cache_bytes_max",
                                value=cache.size_bytes)
        yield CounterMetricFamily("twinlog_consume_cache_hits",
                                  "Messages answered from the kept encoded forms",
                                  value=cache.hit_count)
        yield CounterMetricFamily("twinlog_consume_cache_decoded",
                                  "Messages decoded from the log for a consume answer",
                                  value=cache.decoded_count)
        yield GaugeMetricFamily("twinlog_consume_queue_open_files",
                                "Consume-queue files mapped now",
                                value=store.queues.open_files.open_file_count)
        yield GaugeMetricFamily("twinlog_long_poll_waiters",
                                "Consume reads waiting for a message now (long poll)",
                                value=store.arrivals.waiter_count)
        yield from _store_health_metrics(store)
        yield from timer_metrics(broker)
        yield from pop_metrics(broker)
        yield from _replication_metrics(broker)
        if broker.dledger is not None:
            yield from dledger_metrics(broker.dledger)


def _store_health_metrics(store: MessageStore) -> Iterator[Metric]:
    fault = store.health.fault
    yield GaugeMetricFamily("twinlog_store_writable",
                            "1 while the store takes writes; 0 once an msync/fsync failed",
                            value=1 if fault is None else 0)
    info = GaugeMetricFamily("twinlog_store_write_fault",
                             "The msync/fsync failure that stopped writes (1 when present)",
                             labels=["operation", "errno"])
    if fault is not None:
        info.add_metric([fault.operation, fault.errno_name], 1)
    yield info
    yield CounterMetricFamily("twinlog_checkpoint_write_failures",
                              "Checkpoint writes that failed (the previous one stayed)",
                              value=store.flush.checkpoint_failure_count)


def _replication_metrics(broker: Broker) -> Iterator[Metric]:
    replication = broker.replication
    if replication is None:
        return
    diff_bytes = GaugeMetricFamily("twinlog_ha_slave_diff_bytes",
                                   "Master max offset minus the slave's ack (master), or the "
                                   "master offset seen minus the local max (slave)",
                                   labels=["slave"])
    diff = replication.diff()
    if isinstance(diff, MasterDiff):
        for slave in diff.slaves:
            diff_bytes.add_metric([slave.address], slave.diff_bytes)
        yield diff_bytes
        yield GaugeMetricFamily("twinlog_ha_in_sync_slaves", "Slaves in sync",
                                value=diff.in_sync_slave_count)
        service = replication.service
        count = service.connection_count if service is not None else 0
        yield GaugeMetricFamily("twinlog_ha_connections", "HA connections", value=count)
        return
    diff_bytes.add_metric(["self"], diff.diff_bytes)
    yield diff_bytes
    yield GaugeMetricFamily("twinlog_ha_connections", "HA connections (slave: link up)",
                            value=1 if diff.connected else 0)
    if broker.slave_sync is not None:
        state = broker.slave_sync.state
        yield GaugeMetricFamily("twinlog_slave_sync_consecutive_failures",
                                "Metadata sync failures in a row",
                                value=state.consecutive_failures)


def _read_worker_metrics(counts: list[dict[str, int]]) -> Iterator[Metric]:
    if not counts:
        return
    reads = CounterMetricFamily("twinlog_read_worker_reads",
                                "Consume reads a read worker answered", labels=["worker"])
    back = CounterMetricFamily("twinlog_read_worker_handed_back",
                               "Connections a read worker handed back to the broker",
                               labels=["worker"])
    live = GaugeMetricFamily("twinlog_read_worker_live",
                             "Whether a read worker runs (1) or is down (0)", labels=["worker"])
    restarts = CounterMetricFamily("twinlog_read_worker_restarts",
                                   "Restarts of a read worker that died", labels=["worker"])
    for index, worker in enumerate(counts):
        reads.add_metric([str(index)], worker["reads_served"])
        back.add_metric([str(index)], worker["handed_back"])
        live.add_metric([str(index)], worker["live"])
        restarts.add_metric([str(index)], worker["restarts"])
    yield from (reads, back, live, restarts)
