"""Read workers for one server: the table of readable ends published from the broker's store,
the workers started, and the connections they hand back adopted by the server."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from app.broker.broker import Broker
from app.server.read_workers.pool import ReadWorkers
from app.settings import ReplicationMode, Settings
from store.metadata.errors import InvalidTopicName
from store.shared_reads.publisher import EndsPublisher

log = logging.getLogger(__name__)

ENDS_FILE = "read_ends"
# Makes the server's protocol for a connection handed back, with the bytes it carries.
ProtocolFactory = Callable[[bytes], asyncio.Protocol]


def start_read_workers(settings: Settings, broker: Broker, protocol: ProtocolFactory,
                       loop: asyncio.AbstractEventLoop
                       ) -> tuple[ReadWorkers, EndsPublisher] | None:
    """Start `settings.read_workers` workers over the broker's store; None when off (0, or
    TLS, or DLedger mode: docs/read-workers.md)."""
    if settings.read_workers == 0:
        return None
    if settings.tls_cert is not None or settings.replication_mode is ReplicationMode.DLEDGER:
        log.warning("read_workers is %d, but read workers do not run with TLS or in DLedger "
                    "mode: the broker serves every read", settings.read_workers)
        return None
    store = broker.store
    metadata = broker.metadata_store

    def readable(topic: str, queue_id: int) -> bool:
        # check_readable_queue's rule (app/api/routes/consume.py), for a queue the store has;
        # the broker's own topics are not read over HTTP
        try:
            config = metadata.topic_view(topic)
        except InvalidTopicName:
            return False
        return config is None or (config.readable and queue_id < config.read_queue_count)

    publisher = EndsPublisher(store.config.data_dir / ENDS_FILE, store.queues, readable,
                              lambda: store.commit_log.min_offset)
    store.arrivals.listener = publisher.entries_written
    store.dispatch.changes.listener = publisher.changing
    metadata.on_topics_changed(publisher.publish_all)
    publisher.publish_all()  # what changed before the listeners were in place

    def adopt(connection: socket.socket, carried: bytes) -> None:
        loop.create_task(loop.connect_accepted_socket(lambda: protocol(carried), connection))

    config: dict[str, object] = {
        "auth_tokens": {token: [scope.value for scope in scopes]
                        for token, scopes in settings.auth_tokens.items()},
        "long_poll_wait_ms_max": settings.long_poll_wait_ms_max,
        "cache_bytes_max": store.config.encoded_records_bytes_max,
        "connections_max": settings.read_worker_connections_max,
        "header_bytes_max": settings.http_header_bytes_max,
        "keep_alive_timeout_s": settings.http_keep_alive_timeout_s,
        "header_timeout_s": settings.http_header_timeout_s,
    }
    workers = ReadWorkers(settings.read_workers, config, store.config.data_dir,
                          publisher.path, settings.read_worker_restarts_max, adopt)
    workers.start(loop)
    return workers, publisher


def stop_read_workers(started: tuple[ReadWorkers, EndsPublisher], broker: Broker) -> None:
    workers, publisher = started
    workers.stop()
    store = broker.store
    store.arrivals.listener = None
    store.dispatch.changes.listener = None
    broker.metadata_store.on_topics_changed(lambda: None)
    publisher.close()
