"""The message store: commit log, consume queues, dispatch, flush, retention, recovery.

`put_message` answers at once with the append result and a `PutCompletion` that completes
when the configured guarantees hold (flush for SYNC_FLUSH, slaves for SYNC_MASTER). Nothing
here knows HTTP or sockets: replication plugs in through `ReplicationGuard`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Sequence

from store.arrivals import Arrivals
from store.clock import ClockMs, monotonic_ms, wall_ms
from store.commit_log import CommitLog
from store.config import StoreConfig
from store.dispatch import DispatchService, SystemRecordHandler, SystemRunHandler
from store.encoded_reads import EncodedRecords
from store.errors import StoreStateError
from store.files.allocate_service import AllocateService
from store.files.disk import REAL_DISK, Disk
from store.flush import FlushService
from store.health import StoreHealth
from store.index.consume_queue import ConsumeQueues
from store.index.key_index import KeyIndex
from store.paths import StorePaths
from store.reads import GetMessagesResult
from store.record import Message
from store.recovery import RecoveryReport
from store.replication_guard import ReplicationGuard
from store.retention import RetentionService
from store.status import (
    AppendRawStatus,
    BrokerRole,
    FlushDiskType,
    PutMessageResult,
    PutMessageStatus,
)
from store.store_dledger import DLedgerEntries
from store.store_lifecycle import Lifecycle, StoreLifecycle, keep_log_file_size
from store.store_reads import StoreReads
from store.system_feed import SystemRecordFeed
from store.system_topics import (
    METADATA_TOPIC,
    OP_TOPIC_DELETE,
    PROPERTY_OP,
    PROPERTY_SUBJECT_TOPIC,
    SnapshotAt,
    is_system_topic,
)
from store.timers.lane_reader import read_lane
from store.timers.names import SCHEDULE_TOPIC, TIMER_LOG_TOPIC, TIMER_TOPIC
from store.timers.scheduler import TimerScheduler, Writer
from store.timers.state import SavedStates, TimerState
from store.tombstones import Tombstones, revived_start
from store.waits.completion import Pending, PutCompletion
from store.waits.deadlines import DeadlineService

log = logging.getLogger(__name__)

_OK = PutCompletion.done(PutMessageStatus.PUT_OK)


def _or_minus_one(value: int | None) -> int:
    return -1 if value is None else value


class MessageStore(StoreLifecycle, StoreReads, DLedgerEntries):
    def __init__(self, config: StoreConfig, disk: Disk = REAL_DISK, *,
                 commit_limited: bool = False) -> None:
        """`disk` is the file layer every msync, fsync and allocation goes through (tests
        pass one that records or fails them). `commit_limited` (DLedger mode): dispatch,
        reads and `confirmed_offset` stop at the commit limit (`set_commit_limit`), which
        starts at 0: after a restart nothing new is dispatched before the leader says so.
        The commit log's file size is the one its files have, if it has any
        (`keep_log_file_size`): `self.config` says which."""
        config = keep_log_file_size(config)
        self.config = config
        self.paths = StorePaths(config.data_dir)
        self.state = Lifecycle.CREATED
        self._disk = disk
        # Writable until an msync/fsync fails (store/health.py); reads go on either way.
        self.health = StoreHealth()
        self.health.add_listener(self._update_fast_path)
        self.queues = ConsumeQueues(config, disk)
        self.commit_log = CommitLog(config, on_append=self._on_append, disk=disk)
        self.commit_log.reserve_queue = self.queues.reserve_for
        self.encoded_records = EncodedRecords(self.commit_log,
                                              config.encoded_records_bytes_max)
        self.allocate = AllocateService(self.commit_log.files)
        self.arrivals = Arrivals(config.long_poll_waiters_max)
        self.system_feed = SystemRecordFeed(self)
        self.tombstones = Tombstones(self.paths.deleted_topics, disk)
        self.key_index = KeyIndex(self.paths.index_dir, config.key_index_slot_count,
                                  config.key_index_entries_per_file, disk)
        self.dispatch = DispatchService(self.commit_log, self.queues, self.arrivals,
                                        self.tombstones, self.key_index)
        if commit_limited:
            self.dispatch.limit_offset = 0
        self._wake_dispatch = self.dispatch.wake
        # Delayed messages: every replica derives lane progress and cancels from its log.
        self.timer_state = TimerState()
        self.timer_copies = SavedStates()  # what a cut of the log derives the state from
        self._timer_save_failing = False
        self.dispatch.on_timer_record = self.timer_state.apply_raw
        plan = config.timers
        self.commit_log.set_queue_count(SCHEDULE_TOPIC, plan.level_count)
        self.commit_log.set_queue_count(TIMER_TOPIC, plan.timer_lane_count)
        self.commit_log.set_queue_count(TIMER_LOG_TOPIC, 1)
        self.flush = FlushService(config, self.commit_log, self.queues, self.dispatch,
                                  self.paths.checkpoint, disk, self.health, self.key_index,
                                  self.save_timer_state)
        self.retention = RetentionService(config, self.commit_log, self.queues, self.dispatch)
        self.deadlines = DeadlineService()
        self.deadlines.watch(self.flush.waits)
        self.deadlines.watch(self.dispatch.dispatched_waits)
        self.recovery: RecoveryReport | None = None
        self._replication: ReplicationGuard | None = None
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._is_slave = config.broker_role is BrokerRole.SLAVE
        self._is_sync_master = config.broker_role is BrokerRole.SYNC_MASTER
        self._lock_fd: int | None = None
        self._accepting_without_waits = False
        self._append_listeners: tuple[Callable[[], None], ...] = ()
        # The highest offset seen replicated (SYNC_MASTER): acknowledged bytes stay so when a
        # slave disconnects; after a restart nothing counts until a slave reports again.
        self._replicated_offset_max = 0
        # Refusals by status; PUT_OK apart, as a plain int: hashing an enum is not free.
        self.put_counts: Counter[PutMessageStatus] = Counter()
        self.put_ok_count = 0
        self.put_bytes_total = 0

    # -- puts ------------------------------------------------------------------------------

    def set_replication(self, guard: ReplicationGuard | None) -> None:
        self._replication = guard
        self._update_fast_path()

    def change_role(self, role: BrokerRole) -> None:
        """Promotion or demotion: the write path follows `role` from the next put on. The
        caller swaps replication around this call (stopped before, started after)."""
        if self.state is not Lifecycle.RUNNING:
            raise StoreStateError(f"change_role() on a store that is {self.state.value}")
        if self._is_slave and role is not BrokerRole.SLAVE:
            # A slave's raw appends number no queue offsets (dispatch gives the records their
            # entries): the first put as a master must continue each queue, so every record
            # received is dispatched and the offsets are taken from the queues. Replication is
            # stopped, so the log does not grow under this loop.
            while self.dispatch.dispatch_available():
                pass
            # Frames are cut at any byte: a master that died mid-record left this log ending
            # in part of one. Appended after it, every new record would sit behind a torn one
            # (unreadable, and cut by the next recovery): a master appends after whole records.
            torn_from = self.dispatch.dispatched_offset
            if torn_from < self.commit_log.max_offset:
                log.warning("promotion: cutting a torn record at [%d, %d) that the master did "
                            "not finish sending", torn_from, self.commit_log.max_offset)
                self.truncate_log(torn_from)
            self.commit_log.set_queue_offsets(self.queues.queue_offsets())
        self.config = dataclasses.replace(self.config, broker_role=role)
        self._is_slave = role is BrokerRole.SLAVE
        self._is_sync_master = role is BrokerRole.SYNC_MASTER
        self._update_fast_path()

    def set_queue_count(self, topic: str, queue_count: int) -> None:
        self.commit_log.set_queue_count(topic, queue_count)

    def delete_topic(self, topic: str) -> int:
        """Remove a topic's consume queues (and, through its tombstone, its key-index entries);
        its records stay in the commit log for retention. The tombstone is durable before any
        queue goes, so no redispatch (now or at a later recovery) brings them back. Returns
        the number of queues removed; OSError when the tombstone could not be written."""
        if self.state is not Lifecycle.RUNNING:
            raise StoreStateError(f"delete_topic() on a store that is {self.state.value}")
        # Dead below the log's last byte: every record of the topic so far, and a cut back
        # to this end (nothing lost) does not revive it (Tombstones.cut).
        self.tombstones.add(topic, max(0, self.commit_log.max_offset - 1),
                            self.commit_log.min_offset)

        def remove() -> int:
            self.commit_log.forget_topic(topic)
            return self.queues.remove_topic(topic)

        with self.dispatch.changes.changing():
            return self.dispatch.hold_still(remove)

    def put_message(self, message: Message) -> tuple[PutMessageResult, PutCompletion]:
        if not self._accepting_without_waits:
            refusal = self._refusal()
            if refusal is not None:
                return refusal, PutCompletion.done(refusal.status)
        result = self.commit_log.append(message)
        return result, self._guarantees(result)

    def put_system_message(self, message: Message) -> tuple[PutMessageResult, PutCompletion]:
        """A record of a system topic (store/system_topics.py), with the guarantees of any put.
        A topic delete forgets the topic's next queue offsets in the append's lock hold."""
        assert is_system_topic(message.topic), message.topic
        refusal = self._refusal()
        if refusal is not None:
            return refusal, PutCompletion.done(refusal.status)
        forget = (message.properties.get(PROPERTY_SUBJECT_TOPIC)
                  if message.properties.get(PROPERTY_OP) == OP_TOPIC_DELETE else None)
        result = self.commit_log.append(message, forget)
        return result, self._guarantees(result, counted=False)

    def put_system_messages(self, messages: Sequence[Message], *, applied_ahead: bool = False
                            ) -> list[tuple[PutMessageResult, PutCompletion]]:
        """Records of a system topic appended under one lock hold (no topic delete among
        them), each with the guarantees of a put; not counted as client puts.

        `applied_ahead`: the writer has applied them itself (a pop decision), so nothing waits
        on their dispatch and the append does not wake the dispatch thread: it takes them at
        its next round, woken by another append or at its idle wait. Waking a parked thread
        is a system call that costs tens of microseconds on a virtual machine, once per
        decision otherwise. Replication is woken as for any append."""
        assert all(is_system_topic(message.topic)
                   and message.properties.get(PROPERTY_OP) != OP_TOPIC_DELETE
                   for message in messages)
        refusal = self._refusal()
        if refusal is not None:
            done = PutCompletion.done(refusal.status)
            return [(refusal, done) for _ in messages]
        return [(result, self._guarantees(result, counted=False))
                for result in self.commit_log.append_batch(
                    messages, on_append=self._on_append_replicate if applied_ahead else None)]

    def put_system_messages_built(
            self, build: Callable[[dict[tuple[str, int], int]], Sequence[Message]]
    ) -> list[tuple[PutMessageResult, PutCompletion]]:
        """Records of a system topic built from the next queue offsets in the append's lock
        hold (CommitLog.append_built: a metadata snapshot), each with a put's guarantees."""
        refusal = self._refusal()
        if refusal is not None:
            return [(refusal, PutCompletion.done(refusal.status))]
        return [(result, self._guarantees(result, counted=False))
                for result in self.commit_log.append_built(build)]

    def wait_dispatched(self, end_offset: int, timeout_ms: int) -> Pending:
        """PUT_OK once dispatch has passed `end_offset` (a metadata record below it is applied
        here), SERVICE_NOT_AVAILABLE when it has not within `timeout_ms`."""
        if self.dispatch.dispatched_offset >= end_offset:
            reached = Pending()
            reached.set(PutMessageStatus.PUT_OK)
            return reached
        pending = self.dispatch.dispatched_waits.add(end_offset, monotonic_ms() + timeout_ms)
        self.dispatch.wake()
        self.deadlines.wake()
        return pending

    def attach_system_records(self, handler: SystemRecordHandler, from_queue_offset: int,
                              applied_offset: int | None = None,
                              reset: Callable[[], None] | None = None,
                              cut: Callable[[int], None] | None = None,
                              snapshot: SnapshotAt | None = None,
                              run_handler: SystemRunHandler | None = None) -> int:
        """Hand every metadata record to `handler`, in log order: first those dispatched
        already from `from_queue_offset` of the metadata topic on (what the metadata layer has
        not applied yet: recovery redispatches before it is attached), then each one dispatch
        reaches. Returns how many were caught up. With dispatch held still, so none is missed
        or handed twice between the two. With `reset`, the layer never keeps what the log
        lost: when its last applied record (`applied_offset`) is not in the log, or a cut
        (`truncate_log`) removes one it applied, it is reset and fed again from the start
        (store/system_feed.py); `cut` hears of every cut of the log. `snapshot`: the last
        whole metadata snapshot among the records the layer applied (it persists it), which
        spares reading the log back from its end to find it. `run_handler` takes dispatch's
        runs of plain records at once (SystemRecordFeed.dispatched_run)."""

        def catch_up() -> int:
            count = self.system_feed.attach(handler, from_queue_offset, applied_offset, reset,
                                            cut, snapshot, run_handler)
            self.dispatch.on_system_record = self.system_feed.dispatched
            self.dispatch.on_system_run = self.system_feed.dispatched_run
            return count

        return self.dispatch.hold_still(catch_up)

    def metadata_retention_floor(self) -> int | None:
        """The lowest commit-log offset retention must keep for the metadata tables to be
        rebuilt from the log (SystemRecordFeed.retention_floor), read with dispatch held."""
        floor = self.dispatch.hold_still(lambda: _or_minus_one(
            self.system_feed.retention_floor()))
        return None if floor < 0 else floor

    def metadata_records_since_snapshot(self) -> int:
        """Metadata records a rebuild from the log would replay now: those dispatched since
        the last whole snapshot (SystemRecordFeed.records_since_snapshot), with dispatch
        held."""
        def count() -> int:
            queue = self.queues.get(METADATA_TOPIC, 0)
            end = 0 if queue is None else queue.max_queue_offset
            return self.system_feed.records_since_snapshot(end)

        return self.dispatch.hold_still(count)

    def detach_system_records(self) -> None:
        self.dispatch.on_system_record = None
        self.dispatch.on_system_run = None
        self.system_feed.detach()

    def put_messages(
        self, messages: Sequence[Message]
    ) -> list[tuple[PutMessageResult, PutCompletion]]:
        """One result per message, all appended under one lock hold."""
        refusal = self._refusal()
        if refusal is not None:
            done = PutCompletion.done(refusal.status)
            return [(refusal, done) for _ in messages]
        return [(result, self._guarantees(result))
                for result in self.commit_log.append_batch(messages)]

    def _refusal(self) -> PutMessageResult | None:
        if self.state is not Lifecycle.RUNNING:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                    detail=f"store is {self.state.value}")
        if self._is_slave:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                    detail="this broker is a slave")
        fault = self.health.fault
        if fault is not None:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                    detail=fault.describe())
        pending = len(self.flush.waits)
        if self._replication is not None:
            pending += self._replication.pending_count
        if pending >= self.config.max_pending_puts:
            return PutMessageResult(PutMessageStatus.OS_PAGE_CACHE_BUSY,
                                    detail=f"{pending} puts are waiting for their guarantees")
        return None

    def _guarantees(self, result: PutMessageResult, *, counted: bool = True) -> PutCompletion:
        """What the put awaits; `counted`: a client's put, in the put counters (a system
        record is not)."""
        status = result.status
        if status is not PutMessageStatus.PUT_OK:
            if counted:
                self.put_counts[status] += 1
            return PutCompletion.done(status)
        if counted:
            self.put_ok_count += 1
            self.put_bytes_total += result.wrote_bytes
        end_offset = result.commit_log_offset + result.wrote_bytes
        flushed = PutCompletion(pending=self.flush.request(end_offset)) if self._sync_flush else _OK
        guard = self._replication
        if guard is None or not self._is_sync_master:
            return flushed
        return PutCompletion.combine(flushed, guard.replication_completion(end_offset))

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> AppendRawStatus:
        """The slave's write path: replicated bytes at exactly our max offset."""
        if self.state is not Lifecycle.RUNNING:
            raise StoreStateError(f"append_raw() on a store that is {self.state.value}")
        if not self.health.is_writable:
            return AppendRawStatus.STORE_NOT_WRITABLE
        return self.commit_log.append_raw(offset, data)

    def truncate_log(self, offset: int) -> int:
        """The slave's repair path: cut the log back to `offset`, where it agrees with its
        master, and make the cut durable before returning (the caller then records the
        master's epochs; the other order could leave old bytes under the new history).
        Consume queues and the dispatch position follow. Returns the bytes cleared."""
        if self.state is not Lifecycle.RUNNING:
            raise StoreStateError(f"truncate_log() on a store that is {self.state.value}")
        assert self.config.broker_role is BrokerRole.SLAVE, "only a slave's log is cut back"
        assert 0 <= offset <= self.commit_log.max_offset

        revived: dict[str, int] = {}

        def cut() -> tuple[int, int]:
            cleared = self.commit_log.truncate(offset)
            self.queues.truncate_physical(offset)
            self.key_index.truncate(offset)
            revived.update(self.tombstones.cut(offset))
            for topic in revived:  # re-indexed from their last deletion left
                self.queues.remove_topic(topic)
            self.commit_log.set_queue_offsets(self.queues.queue_offsets())
            self.system_feed.log_cut(offset)
            return cleared, revived_start(revived, offset, self.commit_log.min_offset,
                                          self.config.mapped_file_size_bytes)

        cleared_bytes = self.dispatch.rewind(cut)
        if revived:
            log.warning("the cut back to %d removed the deletion of %s: their records below it "
                        "are indexed again", offset, ", ".join(sorted(revived)))
            while self.dispatch.dispatch_available():
                pass
            self.commit_log.set_queue_offsets(self.queues.queue_offsets())
        if cleared_bytes:
            # The timer state may hold what the cut records did (a delivery, a cancel): it is
            # derived again, from the newest saved copy below the cut (or the whole log).
            self.dispatch.rewind(lambda: self._rederive_timer_state(offset))
        self.commit_log.flush()  # the directory too, for the files the cut removed
        self.queues.flush()
        return cleared_bytes

    def _rederive_timer_state(self, offset: int) -> tuple[int, int]:
        """A cut's second step: the timer state is loaded from the newest copy a save left at
        or below the cut (SavedStates), and dispatch starts again at the offset it covers; with
        none, the state goes and dispatch starts at the log's first offset
        (DispatchService.rewind). Records below the cut are the ones the copy saw. The file
        takes the same state before the cut returns: the last save may cover records the cut
        removed, and a start after the log grows past it again would take their doings."""
        self.timer_copies.cut(offset)
        copy = self.timer_copies.newest_within(offset, self.commit_log.min_offset)
        if copy is not None and self.timer_state.load_encoded(copy[1]) == copy[0]:
            self._write_timer_state(copy[1])
            return 0, copy[0]
        self.timer_state.reset()
        self._write_timer_state(self.timer_state.encode(self.commit_log.min_offset))
        return 0, self.commit_log.min_offset

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """Called after every append (replication writers wait on it, not on a timer)."""
        self._append_listeners = (*self._append_listeners, listener)

    def remove_append_listener(self, listener: Callable[[], None]) -> None:
        self._append_listeners = tuple(x for x in self._append_listeners if x != listener)

    def _on_append(self) -> None:
        limit = self.dispatch.limit_offset
        # Commit-limited (DLedger), an append past the commit gives dispatch nothing to read
        # and the committing thread dispatches what a commit opens (dispatch_committed); so
        # the append wakes the thread only while committed bytes are left to dispatch, which
        # covers a commit that came before its bytes.
        if limit is None or limit > self.dispatch.dispatched_offset:
            self._wake_dispatch()
        self._on_append_replicate()

    def _on_append_replicate(self) -> None:
        for listener in self._append_listeners:
            listener()

    def timer_scheduler(self, queue_count_of: Callable[[str], int | None], *,
                        clock: ClockMs = wall_ms,
                        cancels_pending_max: int = 10_000,
                        write: Writer | None = None) -> TimerScheduler:
        """The scheduler of this store's delayed messages (store/timers/scheduler.py), not
        started: it reads the lanes here and appends with `write` (`put_messages` unless
        given: DLedger mode writes through the group member). `queue_count_of` answers a
        topic's write queue count, None when the topic does not exist."""
        return TimerScheduler(self.config.timers, self.timer_state, self._read_lane,
                              self._record_or_none, write or self.put_messages, queue_count_of,
                              self.dispatch_caught_up, clock=clock,
                              cancels_pending_max=cancels_pending_max)

    def _read_lane(self, topic: str, queue_id: int, queue_offset: int,
                   count_max: int) -> GetMessagesResult:
        return read_lane(self.commit_log, self.queues, topic, queue_id, queue_offset, count_max)

    @property
    def confirmed_offset(self) -> int:
        """The end of what the store has made durable: flushed, and on a SYNC_MASTER also
        acknowledged by the slaves it needs. Derived data that outlives the broker
        (snapshots) stops here: past it, a power loss or a failover may take records back
        and hand their offsets to new ones."""
        confirmed = self.commit_log.flushed_offset
        limit = self.dispatch.limit_offset
        if limit is not None:
            return min(confirmed, limit)
        if self._is_sync_master:
            guard = self._replication
            if guard is not None:
                self._replicated_offset_max = max(self._replicated_offset_max,
                                                  guard.replicated_offset())
            confirmed = min(confirmed, self._replicated_offset_max)
        return confirmed

    def flush_through(self, end_offset: int) -> Pending:
        """Wake the flush now and wait for the log to be flushed up to `end_offset`: PUT_OK
        then, FLUSH_DISK_TIMEOUT past `sync_flush_timeout_ms` (any flush type). For a reader
        of the confirmed offset (a snapshot) that must not wait a whole flush interval."""
        return self.flush.request(end_offset)

    def confirmation_gap(self, end_offset: int) -> str | None:
        """Why the log below `end_offset` is not all confirmed yet (see `confirmed_offset`),
        in words; None when it is."""
        confirmed = self.confirmed_offset
        if confirmed >= end_offset:
            return None
        missing = f"{end_offset - confirmed} bytes before offset {end_offset}"
        flushed = self.commit_log.flushed_offset
        if flushed < end_offset:
            return (f"{missing} are not flushed to disk yet (flushed offset {flushed}); a "
                    "power loss could still take them back")
        if self.dispatch.limit_offset is not None:
            return (f"{missing} are not committed by the DLedger group yet (committed offset "
                    f"{self.dispatch.limit_offset})")
        return (f"{missing} are not acknowledged by the slaves this SYNC_MASTER needs "
                f"(replicated offset {self._replicated_offset_max}); a failover could take "
                "them back")
