"""MetadataStore: the broker's one handle on its metadata (engine, caches, offset persister).

The store serializes every database write behind one lock: SQLite has a single writer anyway,
and it keeps the in-memory offset table, the topic and group view (store/metadata/view.py) and
the database in step. Reads of topics, groups and offsets never query: they come from the view
and the offset table, which every write keeps current. Two writes stay off that lock because
they are hot: an offset commit for a queue already known, and a produce-time topic check for a
topic already known.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from store.clock import ClockMs, wall_ms
from store.dispatch import SystemRecord
from store.metadata import apply, delay_offsets, groups, offsets, plans, sync, topics
from store.metadata.apply import AppliedPosition
from store.metadata.database import create_metadata_engine, read_transaction
from store.metadata.errors import GroupNotFound, MetadataStoreStateError, TopicNotFound
from store.metadata.log_records import (
    GroupDelete,
    GroupPut,
    MetadataChange,
    MetadataSnapshot,
    OffsetSet,
    TopicDelete,
    TopicPut,
    TopicsPut,
    decode,
)
from store.metadata.migrate import bring_to_head
from store.metadata.models import (
    READ_WRITE,
    ConsumerOffset,
    DataVersion,
    DelayOffset,
    LogPosition,
    SubscriptionGroup,
    TopicConfig,
)
from store.metadata.offset_table import CommitOutcome, ConsumerOffsetTable
from store.metadata.offsets import OffsetKey, check_offset_key, check_offset_target
from store.metadata.rules import (
    DEFAULT_QUEUE_COUNT,
    QUEUE_COUNT_MAX,
    check_group_name,
    check_queue_count,
    check_queue_count_cap,
    check_queue_offset,
    check_topic_name,
)
from store.metadata.sync import TableExport
from store.metadata.versions import MetadataTable, get_data_version, get_data_versions
from store.metadata.view import MetadataView
from store.service import IntervalService

# RocketMQ's flushConsumerOffsetInterval.
DEFAULT_CONSUMER_OFFSET_PERSIST_INTERVAL_MS = 5000


class MetadataStoreState(enum.Enum):
    CREATED = "created"  # Migrated and usable; offsets are persisted only at stop().
    RUNNING = "running"  # The offset persister thread runs.
    STOPPED = "stopped"  # Offsets flushed, engine closed; any further use is an error.


class MetadataStore:
    """Topics, groups, consumer and delay offsets of one broker, in the database at a URL."""

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
            self._applied = AppliedPosition.of(apply.read_log_position(self._engine))
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

    def __enter__(self) -> MetadataStore:
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

    # ---- topics --------------------------------------------------------------------------------

    def ensure_writable_topic(self, *, name: str) -> TopicConfig:
        """For each produce: the topic's config, auto-created if allowed, refused unless writable.

        Raises InvalidTopicName, TopicNotFound (auto-creation off), TopicsMaxReached or
        TopicNotWritable.
        """
        self._check_open()
        topic = self._view.topic(name)
        if topic is None:
            with self._write_lock:
                topic = topics.find_or_create_topic(
                    engine=self._engine,
                    name=name,
                    auto_create_topics=self._auto_create_topics,
                    now_ms=self._clock_ms(),
                    default_queue_count=self._default_queue_count,
                    topics_max=self._topics_max,
                )
                self._view.put_topic(topic)
        topics.check_writable(topic)
        return topic.model_copy()

    @property
    def default_queue_count(self) -> int:
        return self._default_queue_count

    def create_topic(
        self,
        *,
        name: str,
        read_queue_count: int | None = None,
        write_queue_count: int | None = None,
        permission: int = READ_WRITE,
    ) -> TopicConfig:
        """Create a topic; queue counts default to default_queue_count."""
        return self.create_topics([topics.NewTopic(
            name,
            self._default_queue_count if read_queue_count is None else read_queue_count,
            self._default_queue_count if write_queue_count is None else write_queue_count,
            permission,
        )])[0]

    def create_topics(self, new_topics: Sequence[topics.NewTopic]) -> list[TopicConfig]:
        """Create every topic or none, in one transaction (bounded by topics_max together)."""
        self._check_open()
        for topic in new_topics:
            self._check_queue_counts(topic.read_queue_count, topic.write_queue_count)
        with self._write_lock:
            created = topics.create_topics(engine=self._engine, topics=new_topics,
                                           now_ms=self._clock_ms(), topics_max=self._topics_max)
            for config in created:
                self._view.put_topic(config)
            return [config.model_copy() for config in created]

    def _check_queue_counts(self, read_queue_count: int | None,
                            write_queue_count: int | None) -> None:
        for field, count in (("read_queue_count", read_queue_count),
                             ("write_queue_count", write_queue_count)):
            if count is not None:
                check_queue_count_cap(field, count, self._queues_per_topic_max)

    def update_topic(
        self,
        *,
        name: str,
        read_queue_count: int | None = None,
        write_queue_count: int | None = None,
        permission: int | None = None,
    ) -> TopicConfig:
        self._check_open()
        self._check_queue_counts(read_queue_count, write_queue_count)
        with self._write_lock:
            updated = topics.update_topic(
                engine=self._engine,
                name=name,
                now_ms=self._clock_ms(),
                read_queue_count=read_queue_count,
                write_queue_count=write_queue_count,
                permission=permission,
            )
            self._view.put_topic(updated)
            return updated.model_copy()

    def delete_topic(self, *, name: str) -> None:
        """Delete a topic and its consumer offsets (stored and pending)."""
        self._check_open()
        with self._write_lock:
            topics.delete_topic(engine=self._engine, name=name, now_ms=self._clock_ms())
            self._view.drop_topic(name)
            self._offsets.forget(topic=name)

    def cached_topic(self, *, name: str) -> TopicConfig | None:
        """The topic's config (from the view; no query), None when there is no such topic."""
        self._check_open()
        topic = self._view.topic(name)
        return None if topic is None else topic.model_copy()

    def topic_view(self, name: str) -> TopicConfig | None:
        """find_topic for a hot read path: the view's own config, not a copy (the caller must
        not change it). InvalidTopicName as find_topic."""
        check_topic_name(name)
        return self._view.topic(name)

    @property
    def auto_create_topics(self) -> bool:
        return self._auto_create_topics

    def find_topic(self, *, name: str) -> TopicConfig | None:
        self._check_open()
        check_topic_name(name)
        topic = self._view.topic(name)
        return None if topic is None else topic.model_copy()

    def get_topic(self, *, name: str) -> TopicConfig:
        topic = self.find_topic(name=name)
        if topic is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
        return topic

    def list_topics(self) -> list[TopicConfig]:
        self._check_open()
        return [topic.model_copy() for topic in self._view.topics()]

    # ---- subscription groups -------------------------------------------------------------------

    def create_group(
        self,
        *,
        name: str,
        consume_enabled: bool = True,
        broadcast_enabled: bool = False,
        retry_queue_count: int = groups.DEFAULT_RETRY_QUEUE_COUNT,
        retry_times_max: int = groups.DEFAULT_RETRY_TIMES_MAX,
    ) -> SubscriptionGroup:
        self._check_open()
        with self._write_lock:
            plans.check_groups_max(self._engine, name, self._groups_max)
            created = groups.create_group(
                engine=self._engine,
                name=name,
                now_ms=self._clock_ms(),
                consume_enabled=consume_enabled,
                broadcast_enabled=broadcast_enabled,
                retry_queue_count=retry_queue_count,
                retry_times_max=retry_times_max,
            )
            self._view.put_group(created)
            return created.model_copy()

    def update_group(
        self,
        *,
        name: str,
        consume_enabled: bool | None = None,
        broadcast_enabled: bool | None = None,
        retry_queue_count: int | None = None,
        retry_times_max: int | None = None,
    ) -> SubscriptionGroup:
        self._check_open()
        with self._write_lock:
            updated = groups.update_group(
                engine=self._engine,
                name=name,
                now_ms=self._clock_ms(),
                consume_enabled=consume_enabled,
                broadcast_enabled=broadcast_enabled,
                retry_queue_count=retry_queue_count,
                retry_times_max=retry_times_max,
            )
            self._view.put_group(updated)
            return updated.model_copy()

    def delete_group(self, *, name: str) -> None:
        """Delete a group and its consumer offsets (stored and pending)."""
        self._check_open()
        with self._write_lock:
            groups.delete_group(engine=self._engine, name=name, now_ms=self._clock_ms())
            self._view.drop_group(name)
            self._offsets.forget(group_name=name)

    def find_group(self, *, name: str) -> SubscriptionGroup | None:
        self._check_open()
        check_group_name(name)
        group = self._view.group(name)
        return None if group is None else group.model_copy()

    def get_group(self, *, name: str) -> SubscriptionGroup:
        group = self.find_group(name=name)
        if group is None:
            raise GroupNotFound(f"group {name!r} does not exist")
        return group

    def list_groups(self) -> list[SubscriptionGroup]:
        self._check_open()
        return [group.model_copy() for group in self._view.groups()]

    # ---- consumer offsets ----------------------------------------------------------------------

    def commit_consumer_offset(
        self, *, group_name: str, topic: str, queue_id: int, queue_offset: int
    ) -> bool:
        """Move a group's offset forward in memory; True when it changed.

        Persisted with the next batch. Raises OffsetMovesBackwards for a lower offset (use
        reset_consumer_offset), InvalidOffset, and on a queue's first commit GroupNotFound,
        TopicNotFound, InvalidQueueId or a name error.
        """
        self._check_open()
        check_queue_offset(queue_offset)
        key = OffsetKey(group_name, topic, queue_id)
        now_ms = self._clock_ms()
        outcome = self._offsets.commit(key, queue_offset, now_ms=now_ms, allow_new=False)
        if outcome is CommitOutcome.UNKNOWN_KEY:
            # Keys in the table were checked when they entered it; a new one is checked once.
            check_offset_key(key)
            with self._write_lock:
                with read_transaction(self._engine) as session:
                    check_offset_target(session, key)
                outcome = self._offsets.commit(key, queue_offset, now_ms=now_ms, allow_new=True)
        return outcome is CommitOutcome.ADVANCED

    def reset_consumer_offset(
        self, *, group_name: str, topic: str, queue_id: int, queue_offset: int
    ) -> ConsumerOffset:
        """Set an offset in either direction, written to the database at once."""
        self._check_open()
        with self._write_lock:
            offsets.reset_consumer_offset(
                engine=self._engine,
                group_name=group_name,
                topic=topic,
                queue_id=queue_id,
                queue_offset=queue_offset,
                now_ms=self._clock_ms(),
            )
            stored = offsets.get_consumer_offset(
                engine=self._engine, group_name=group_name, topic=topic, queue_id=queue_id
            )
            assert stored is not None and stored.queue_offset == queue_offset, stored
            self._offsets.put_persisted([stored])
            return stored

    def get_consumer_offset(self, *, group_name: str, topic: str, queue_id: int) -> int | None:
        """The group's next offset in the queue (including unpersisted commits), None if none."""
        self._check_open()
        entry = self._offsets.entry(OffsetKey(group_name, topic, queue_id))
        return None if entry is None else entry[0]

    def consumer_offset(self, *, group_name: str, topic: str,
                        queue_id: int) -> ConsumerOffset | None:
        """The group's offset row of one queue (including unpersisted commits), None if none."""
        self._check_open()
        return self._offsets.get(OffsetKey(group_name, topic, queue_id))

    def consumer_offset_entry(self, *, group_name: str, topic: str,
                              queue_id: int) -> tuple[int, int] | None:
        """`consumer_offset` as (queue offset, updated at ms): the commit's answer."""
        self._check_open()
        return self._offsets.entry(OffsetKey(group_name, topic, queue_id))

    def list_consumer_offsets(
        self, *, group_name: str | None = None, topic: str | None = None
    ) -> list[ConsumerOffset]:
        self._check_open()
        return self._offsets.select(group_name=group_name, topic=topic)

    @property
    def pending_consumer_offset_count(self) -> int:
        return self._offsets.pending_count

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
                apply.write_log_position(self._engine, position.model())
                self._persisted_position_queue_offset = position.queue_offset
            return changed

    # ---- metadata records of the log ------------------------------------------------------------

    @property
    def log_position(self) -> LogPosition:
        """How far into the log's metadata records the tables are applied (in memory: what
        the next flush persists)."""
        return self._applied.model()

    def consistent_export(self) -> threading.RLock:
        """Held around reading `log_position` and exporting a table: no record applies in
        between (an export then says exactly which records it reflects)."""
        return self._write_lock

    def apply_record(self, record: SystemRecord) -> MetadataChange | None:
        """Apply one metadata record of the log (dispatch's `on_system_record`, in log order).
        Raises MetadataRecordError for a record this build cannot read: dispatch then stays
        at it (and says so) rather than go on with tables that would differ from the log."""
        change = decode(record.op, record.body)
        with self._write_lock:
            if record.queue_offset < self._applied.queue_offset:
                return None  # in the tables already (a bootstrap from the master took it)
            if record.queue_offset > self._applied.queue_offset and \
                    not (isinstance(change, MetadataSnapshot) and change.part == 0):
                self._lacking = True  # records below it are not in the tables
            if not isinstance(change, MetadataSnapshot) or self._loads(change,
                                                                       record.queue_offset):
                self.apply_change(change)
            # Every record moves it: plain ints, a LogPosition only for who reads it.
            self._applied = AppliedPosition(record.queue_offset + 1, record.commit_log_offset,
                                            self._clock_ms())
            if not isinstance(change, OffsetSet) and not self._snapshot_loading:
                # Topic and group rows are durable at once: so is the position that says they
                # hold this record (with the offsets before it), or a power cut that takes the
                # record from the log would leave its rows where no rebuild looks for them
                # (store/system_feed.py checks the record at the persisted position).
                self.flush_consumer_offsets()
        return change

    def apply_derived(self, record: SystemRecord, moved: Sequence[OffsetSet]) -> None:
        """A record of the metadata topic that another layer applies (group consumption's
        pop records, store/consumption/records.py): the tables take only the group offsets
        it moved (`moved`, derived from it in log order on every replica) and move their
        position past it, so that a restart does not hand it to `apply_record`."""
        with self._write_lock:
            if record.queue_offset < self._applied.queue_offset:
                return
            if record.queue_offset > self._applied.queue_offset:
                self._lacking = True  # records below it are not in the tables
            for change in moved:
                self.apply_change(change)
            self._applied = AppliedPosition(record.queue_offset + 1, record.commit_log_offset,
                                            self._clock_ms())

    def _loads(self, part: MetadataSnapshot, queue_offset: int) -> bool:
        """Whether a snapshot part is loaded into the tables. Where they applied the record
        before its part 0 they hold the snapshot already (it is exact: app/broker/
        metadata_snapshots.py), so its parts pass as nothing: no rewrite, and no moment with
        half the tables. Where they did not (a rebuild that starts at it), every part is
        loaded, and the position is persisted only with the last: a crash midway finds the
        tables reset and rebuilds them again."""
        if part.part == 0:
            self._snapshot_loading = (queue_offset != self._applied.queue_offset
                                      or self._lacking)
        loading = self._snapshot_loading
        if part.part == part.parts - 1:
            self._snapshot_loading = False
            if loading:
                self._lacking = False
        return loading

    def reset_applied_state(self) -> None:
        """The log lost records these tables applied: empty the tables its records fill and
        go back to its start, so that its records, applied again, give exactly its state
        (store/system_feed.py). Offsets committed but not persisted go too: they came from
        records as well."""
        self._check_open()
        with self._write_lock:
            now_ms = self._clock_ms()
            apply.clear_applied(self._engine, now_ms)
            self._offsets = ConsumerOffsetTable(())
            self._view.replace_topics(())
            self._view.replace_groups(())
            self._snapshot_loading = self._lacking = False
            self._applied = AppliedPosition(0, 0, now_ms)
            self._persisted_position_queue_offset = 0

    def bootstrap_position(self, position: LogPosition) -> None:
        """After taking a master's tables (slave sync's bootstrap): records below `position`
        are in them, and apply from there on; persisted at once."""
        with self._write_lock:
            if position.queue_offset > self._applied.queue_offset:
                self._applied = AppliedPosition.of(position)
                self._lacking = False  # the master's tables: all it applied below there
                apply.write_log_position(self._engine, position)
                self._persisted_position_queue_offset = position.queue_offset

    def apply_change(self, change: MetadataChange) -> None:
        """Apply one change to the tables: a pure function of the tables and the change."""
        self._check_open()
        with self._write_lock:
            if isinstance(change, OffsetSet):
                self._offsets.apply(OffsetKey(change.group_name, change.topic, change.queue_id),
                                    change.queue_offset, reset=change.reset,
                                    now_ms=change.at_ms)
            elif isinstance(change, TopicPut):
                self._view.put_topic(apply.put_topic(self._engine, change))
            elif isinstance(change, TopicsPut):
                for config in apply.put_topics(self._engine, change.topics):
                    self._view.put_topic(config)
            elif isinstance(change, TopicDelete):
                apply.delete_topic(self._engine, change)
                self._view.drop_topic(change.name)
                self._offsets.forget(topic=change.name)
            elif isinstance(change, GroupPut):
                self._view.put_group(apply.put_group(self._engine, change))
            elif isinstance(change, GroupDelete):
                apply.delete_group(self._engine, change)
                self._view.drop_group(change.name)
                self._offsets.forget(group_name=change.name)
            elif isinstance(change, MetadataSnapshot):
                self._apply_snapshot(change)
            else:
                raise AssertionError(f"unknown change {change!r}")

    def _apply_snapshot(self, snapshot: MetadataSnapshot) -> None:
        """A snapshot part: part 0 makes the tables its own, later parts add theirs."""
        topics_written, groups_written, offsets_written = apply.put_snapshot(self._engine,
                                                                             snapshot)
        if snapshot.part == 0:
            self._offsets = ConsumerOffsetTable(())
            self._view.replace_topics(())
            self._view.replace_groups(())
        for topic in topics_written:
            self._view.put_topic(topic)
        for group in groups_written:
            self._view.put_group(group)
        self._offsets.put_persisted(offsets_written)  # written with the rows

    def snapshot_tables(self) -> tuple[int, tuple[list[TopicPut], list[GroupPut],
                                                  list[OffsetSet]]]:
        """The tables as a snapshot holds them (app/broker/metadata_snapshots.py) and the
        position they are applied to (the next metadata record's queue offset), read in one
        hold of the write lock: no record applies in between."""
        self._check_open()
        with self._write_lock:
            topics = [TopicPut(t.name, t.read_queue_count, t.write_queue_count, t.permission,
                               t.created_at_ms, t.updated_at_ms) for t in self._view.topics()]
            groups = [GroupPut(g.name, g.consume_enabled, g.broadcast_enabled,
                               g.retry_queue_count, g.retry_times_max, g.created_at_ms,
                               g.updated_at_ms) for g in self._view.groups()]
            offsets = [OffsetSet(o.group_name, o.topic, o.queue_id, o.queue_offset, True,
                                 o.updated_at_ms) for o in self._offsets.entries()]
            return self._applied.queue_offset, (topics, groups, offsets)

    # ---- plans: the records a request would write (the tables change when they apply) --------

    def plan_create_topics(self, new_topics: Sequence[topics.NewTopic]) -> list[TopicPut]:
        self._check_open()
        return plans.create_topics(self._engine, new_topics, now_ms=self._clock_ms(),
                                   topics_max=self._topics_max,
                                   queues_per_topic_max=self._queues_per_topic_max)

    def plan_update_topic(self, *, name: str, read_queue_count: int | None = None,
                          write_queue_count: int | None = None,
                          permission: int | None = None) -> TopicPut | None:
        self._check_open()
        return plans.update_topic(self._engine, name, now_ms=self._clock_ms(),
                                  read_queue_count=read_queue_count,
                                  write_queue_count=write_queue_count, permission=permission,
                                  queues_per_topic_max=self._queues_per_topic_max)

    def plan_delete_topic(self, *, name: str) -> TopicDelete:
        self._check_open()
        return plans.delete_topic(self._engine, name, now_ms=self._clock_ms())

    def plan_create_group(self, *, name: str, consume_enabled: bool = True,
                          broadcast_enabled: bool = False,
                          retry_queue_count: int = groups.DEFAULT_RETRY_QUEUE_COUNT,
                          retry_times_max: int = groups.DEFAULT_RETRY_TIMES_MAX) -> GroupPut:
        self._check_open()
        plans.check_groups_max(self._engine, name, self._groups_max)
        return plans.create_group(self._engine, name, now_ms=self._clock_ms(),
                                  consume_enabled=consume_enabled,
                                  broadcast_enabled=broadcast_enabled,
                                  retry_queue_count=retry_queue_count,
                                  retry_times_max=retry_times_max)

    def plan_update_group(self, *, name: str, consume_enabled: bool | None = None,
                          broadcast_enabled: bool | None = None,
                          retry_queue_count: int | None = None,
                          retry_times_max: int | None = None) -> GroupPut | None:
        self._check_open()
        return plans.update_group(self._engine, name, now_ms=self._clock_ms(),
                                  consume_enabled=consume_enabled,
                                  broadcast_enabled=broadcast_enabled,
                                  retry_queue_count=retry_queue_count,
                                  retry_times_max=retry_times_max)

    def plan_delete_group(self, *, name: str) -> GroupDelete:
        self._check_open()
        return plans.delete_group(self._engine, name, now_ms=self._clock_ms())

    def plan_offset(self, *, group_name: str, topic: str, queue_id: int, queue_offset: int,
                    reset: bool) -> OffsetSet | None:
        """A commit (forward only: OffsetMovesBackwards) or a reset; None when the offset is
        the group's already. A queue's first commit checks that its group, topic and queue
        exist (GroupNotFound, TopicNotFound, InvalidQueueId); later ones need no query."""
        self._check_open()
        check_queue_offset(queue_offset)
        key = OffsetKey(group_name, topic, queue_id)
        current = self._offsets.entry(key)
        if current is None:
            plans.check_offset(self._engine, key)
        elif current[0] == queue_offset:
            return None
        elif not reset:
            offsets.check_moves_forward(key, current[0], queue_offset)
        return OffsetSet(group_name, topic, queue_id, queue_offset, reset, self._clock_ms())

    # ---- delay offsets -------------------------------------------------------------------------

    def get_delay_offset(self, *, delay_level: int) -> int | None:
        self._check_open()
        return delay_offsets.get_delay_offset(engine=self._engine, delay_level=delay_level)

    def list_delay_offsets(self) -> list[DelayOffset]:
        self._check_open()
        return delay_offsets.list_delay_offsets(engine=self._engine)

    def set_delay_offsets(self, *, offsets: Mapping[int, int]) -> int:
        """Store offsets by delay level; returns how many changed."""
        self._check_open()
        with self._write_lock:
            return delay_offsets.set_delay_offsets(
                engine=self._engine, offsets=offsets, now_ms=self._clock_ms()
            )

    # ---- data versions, export and import (slave sync) -----------------------------------------

    def data_version(self, table: MetadataTable) -> DataVersion:
        self._check_open()
        return get_data_version(engine=self._engine, table=table)

    def data_versions(self) -> dict[MetadataTable, DataVersion]:
        self._check_open()
        return get_data_versions(engine=self._engine)

    def export_table(self, table: MetadataTable) -> TableExport:
        """What a master serves a slave; consumer offsets are flushed first, so they are current."""
        self._check_open()
        with self._write_lock:
            if table is MetadataTable.CONSUMER_OFFSET:
                self.flush_consumer_offsets()
            return sync.export_table(engine=self._engine, table=table)

    def import_topics(self, export: Mapping[str, Any]) -> bool:
        """Replace the topics with a master's export when its version differs; True if applied."""
        self._check_open()
        with self._write_lock:
            applied = sync.import_topics(engine=self._engine, export=export)
            if applied:
                self._view.replace_topics(topics.list_topics(engine=self._engine))
            return applied

    def import_groups(self, export: Mapping[str, Any]) -> bool:
        self._check_open()
        with self._write_lock:
            applied = sync.import_groups(engine=self._engine, export=export)
            if applied:
                self._view.replace_groups(groups.list_groups(engine=self._engine))
            return applied

    def import_delay_offsets(self, export: Mapping[str, Any]) -> bool:
        self._check_open()
        with self._write_lock:
            return sync.import_delay_offsets(engine=self._engine, export=export)

    def merge_consumer_offsets(self, export: Mapping[str, Any]) -> int:
        """Take a master's offsets for the keys it has, keep the others; returns the count."""
        self._check_open()
        with self._write_lock:
            applied = sync.merge_consumer_offsets(engine=self._engine, export=export)
            self._offsets.put_persisted(applied)
            return len(applied)
