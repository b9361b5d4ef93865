"""MetadataStoreBase: what every part of MetadataStore shares (engine, caches, write lock,
applied position), its lifecycle and the offset persister's flush."""

from __future__ import annotations

import enum
import threading
from types import TracebackType
from typing import Self

from store.clock import ClockMs, wall_ms
from store.metadata import apply, groups, offsets, topics
from store.metadata.apply import AppliedPosition
from store.metadata.database import create_metadata_engine
from store.metadata.errors import MetadataStoreStateError
from store.metadata.log_records import OffsetSet
from store.metadata.migrate import bring_to_head
from store.metadata.offset_table import ConsumerOffsetTable
from store.metadata.rules import (
    DEFAULT_QUEUE_COUNT,
    QUEUE_COUNT_MAX,
    check_queue_count,
    check_queue_count_cap,
)
from store.metadata.view import MetadataView
from store.service import IntervalService
from store.system_topics import SnapshotAt

# How many appended commits wait for dispatch with their change kept (store_log.py).
APPENDED_CHANGES_MAX = 65_536

# RocketMQ's flushConsumerOffsetInterval.
DEFAULT_CONSUMER_OFFSET_PERSIST_INTERVAL_MS = 5000


class MetadataStoreState(enum.Enum):
    CREATED = "created"  # Migrated and usable; offsets are persisted only at stop().
    RUNNING = "running"  # The offset persister thread runs.
    STOPPED = "stopped"  # Offsets flushed, engine closed; any further use is an error.


class MetadataStoreBase:
    """The state of one MetadataStore and its lifecycle; store/metadata/metadata_store.py
    puts the parts that use it together."""

    def __init__(
        self,
        database_url: str,
        *,
        auto_create_topics: bool = True,
        default_queue_count: int = DEFAULT_QUEUE_COUNT,
        consumer_offset_persist_interval_ms: int = DEFAULT_CONSUMER_OFFSET_PERSIST_INTERVAL_MS,
        clock_ms: ClockMs = wall_ms,
        topics_max: int | None = None,
        groups_max: int | None = None,
        queues_per_topic_max: int = QUEUE_COUNT_MAX,
    ) -> None:
        """Open the database and upgrade it to the newest schema (Alembic, never create_all).

        `topics_max` (None: no cap) and `queues_per_topic_max` bound what create and
        auto-create may add; topics imported from a master (slave sync) are not capped, a
        slave mirrors whatever its master holds.
        """
        check_queue_count("queues_per_topic_max", queues_per_topic_max)
        check_queue_count_cap("default_queue_count", default_queue_count, queues_per_topic_max)
        if topics_max is not None and topics_max < 1:
            raise ValueError(f"topics_max must be positive, got {topics_max}")
        if consumer_offset_persist_interval_ms <= 0:
            raise ValueError(
                "consumer_offset_persist_interval_ms must be positive,"
                f" got {consumer_offset_persist_interval_ms}"
            )
        self._auto_create_topics = auto_create_topics
        self._default_queue_count = default_queue_count
        self._topics_max = topics_max
        self._groups_max = groups_max
        self._queues_per_topic_max = queues_per_topic_max
        self._clock_ms = clock_ms
        self._engine = create_metadata_engine(database_url)
        try:
            # Through our own engine, so an in-memory SQLite database is migrated too.
            with self._engine.connect() as connection:
                bring_to_head(connection)
            stored_offsets = offsets.list_consumer_offsets(engine=self._engine)
            persisted = apply.read_log_position(self._engine)
            self._applied = AppliedPosition.of(persisted)
            self._view = MetadataView(topics.list_topics(engine=self._engine),
                                      groups.list_groups(engine=self._engine))
        except BaseException:
            self._engine.dispose()
            raise
        self._offsets = ConsumerOffsetTable(stored_offsets)
        self._persisted_position_queue_offset = self._applied.queue_offset
        # Whether the parts of a snapshot arriving are loaded (the tables did not apply the
        # records before it: a rebuild starting there) rather than passed over; and whether
        # the tables lack records (a record came past a gap: a log that begins at its
        # master's min offset) until a snapshot is loaded. While they do, the position is
        # not persisted: a restart finds it below what the log holds and rebuilds.
        self._snapshot_loading = False
        self._lacking = False
        # The last whole snapshot among the records applied, persisted with the position
        # (store/system_feed.py finds it there at a start), and the one whose parts apply.
        self._snapshot_at: SnapshotAt | None = apply.snapshot_of(persisted)
        self._snapshot_arriving: SnapshotAt | None = None
        # The forward commits this broker appended and showed ahead, by their records'
        # commit-log offsets: dispatch applies these objects rather than decode the records
        # again (at most APPENDED_CHANGES_MAX: past it, records are decoded).
        self._appended: dict[int, OffsetSet] = {}
        # Held around every use of `_appended`: the appender adds while dispatch takes and
        # drops (iterating a dict another thread grows raises, and failed dispatch for 1 s).
        self._appended_lock = threading.Lock()
        # Reentrant: export and delete hold it while they flush offsets, which takes it again.
        self._write_lock = threading.RLock()
        self._state = MetadataStoreState.CREATED
        self._persister = IntervalService(
            name="consumer-offset-persister",
            interval_ms=consumer_offset_persist_interval_ms,
            action=self.flush_consumer_offsets,
        )

    # ---- lifecycle -----------------------------------------------------------------------------

    @property
    def state(self) -> MetadataStoreState:
        return self._state

    def start(self) -> None:
        """Start persisting consumer offsets every interval."""
        if self._state is not MetadataStoreState.CREATED:
            raise MetadataStoreStateError(
                f"cannot start a MetadataStore that is {self._state.value}"
            )
        self._state = MetadataStoreState.RUNNING
        self._persister.start()

    def stop(self) -> None:
        """Stop the persister, persist every pending offset, close the database.

        Stopping twice is allowed: shutdown paths (signal handler, lifespan) may both call it.
        """
        if self._state is MetadataStoreState.STOPPED:
            return
        if self._state is MetadataStoreState.RUNNING:
            self._persister.stop()
        try:
            self.flush_consumer_offsets()
        finally:
            self._state = MetadataStoreState.STOPPED
            self._engine.dispose()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _check_open(self) -> None:
        if self._state is MetadataStoreState.STOPPED:
            raise MetadataStoreStateError("the MetadataStore is stopped")

    def flush_consumer_offsets(self) -> int:
        """Persist every offset committed since the last flush; returns the rows changed."""
        with self._write_lock:
            # Taken first: every record below it is in the batch or already in the tables.
            position = self._applied
            batch = self._offsets.take_dirty()
            changed = 0
            if batch:
                try:
                    changed = offsets.persist_consumer_offsets(
                        engine=self._engine, offsets=batch, now_ms=self._clock_ms()
                    )
                except BaseException:
                    self._offsets.restore_dirty(batch)
                    raise
            if position.queue_offset > self._persisted_position_queue_offset and \
                    not self._snapshot_loading and not self._lacking:
                apply.write_log_position(self._engine, position.model(), self._snapshot_at)
                self._persisted_position_queue_offset = position.queue_offset
            return changed
