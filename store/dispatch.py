"""Dispatch: reads the commit log from where it left off and writes consume-queue entries.

It reads records the way a slave receives them, so raw replicated bytes get queues too: a
record is dispatched only once all of its bytes are below the commit log's max offset.

Records of the metadata topic (store/system_topics.py) are dispatched in batches of their own,
in log order: the batch before them is written first; then, record by record, a topic delete's
tombstone applies (the topic's queues go, its older records stay dead), a metadata snapshot's
queue starts begin the queues this log holds no record of (ConsumeQueues.start_at), and
`on_system_record` (the metadata layer, when attached) applies the record; only then do their
queue entries go in and dispatch move past them. A failing apply leaves dispatch at that record
(past the ones before it), to try again. Whoever waits for a record to be applied waits on
`dispatched_waits` for its end offset.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from store.arrivals import Arrivals
from store.commit_log import CommitLog
from store.dispatch_failures import WRITE_ATTEMPTS_MAX, DispatchFailures
from store.files.mapped_file import MappedFile
from store.index.consume_queue import ConsumeQueue, ConsumeQueues, Entry
from store.index.key_index import KeyIndex
from store.property_names import PROPERTY_KEYS, PROPERTY_TAGS
from store.record import (
    BLANK_MAGIC,
    HEADER_SIZE,
    MESSAGE_MAGIC,
    PROPERTY_SEPARATOR,
    RECORD_OVERHEAD,
    RecordError,
    tags_code,
)
from store.service import ServiceThread
from store.shared_reads.changes import StoreChanges
from store.status import PutMessageStatus
from store.system_topics import (
    METADATA_TOPIC_BYTES,
    OP_SNAPSHOT,
    OP_TOPIC_DELETE,
    PROPERTY_OP,
    PROPERTY_SUBJECT_TOPIC,
    queue_starts,
)
from store.timers.names import STATE_PROPERTY_PREFIX
from store.tombstones import Tombstones
from store.waits.offset_waits import OffsetWaits

log = logging.getLogger(__name__)

# TOTALSIZE, MAGIC, QUEUEID at 12, QUEUEOFFSET at 20, STORETIMESTAMP at 56, BODYLEN at 84:
# one unpack a record.
_DISPATCH_FIELDS = struct.Struct(">iI4xi4xq28xq20xi")
_PREFIX = struct.Struct(">iI")
_TOPIC_NAMES_MAX = 65536
_TAGS_PREFIX = (PROPERTY_TAGS + "\x01").encode()
_KEYS_PREFIX = (PROPERTY_KEYS + "\x01").encode()
_SEPARATOR = PROPERTY_SEPARATOR.encode()
_BATCH_RECORDS_MAX = 4096
# (topic bytes, properties, commit-log offset, store timestamp ms) of a record with keys.
_Keyed = tuple[bytes, bytes, int, int]
_IDLE_WAIT_S = 0.05
_BATCHES_PER_ROUND_MAX = 64
_OP_PREFIX = (PROPERTY_OP + "\x01").encode()
_SUBJECT_PREFIX = (PROPERTY_SUBJECT_TOPIC + "\x01").encode()
_TIMER_STATE_PREFIX = STATE_PROPERTY_PREFIX.encode()


class SystemRecord(NamedTuple):
    """A metadata record as dispatch hands it to the metadata layer: where it is (its
    commit-log offset and its queue offset in the metadata topic), what it does, its body.
    (A named tuple: dispatch builds one for every offset commit, on every replica.)"""

    commit_log_offset: int
    queue_offset: int
    op: str
    body: bytes


SystemRecordHandler = Callable[[SystemRecord], None]
# Applies a run of metadata records (none a topic delete or a snapshot part) in log order,
# exactly as the record handler would one by one; raises SystemRunStopped when one fails.
SystemRunHandler = Callable[[Sequence[SystemRecord]], None]
# What dispatch parsed of a metadata record: its position in the file, body size, end of its
# topic, queue offset, total size and queue key.
class _Parsed(NamedTuple):
    """A metadata record of the batch, parsed: applied once the batch is read."""

    position: int  # in its file
    body_size: int
    topic_end: int
    queue_offset: int
    total_size: int
    key: tuple[bytes, int]  # (topic, queue id) of its consume-queue entry


def _add_system_entries(pending: dict[tuple[bytes, int], list[Entry]],
                        system: Sequence[_Parsed], base: int) -> None:
    """The consume-queue entries of applied metadata records (no tag code)."""
    for item in system:
        pending.setdefault(item.key, []).append(
            (item.queue_offset, base + item.position, item.total_size, 0))
# The operations whose records the store applies a part of itself (one by one).
_STORE_OPS = frozenset({OP_TOPIC_DELETE, OP_SNAPSHOT})
_OPS_MAX = 256


class SystemRunStopped(Exception):
    """A run's apply stopped at its record `applied` (those before it are applied), which
    failed with `error`: dispatch stays at that record and raises `error`."""

    def __init__(self, applied: int, error: BaseException) -> None:
        super().__init__(f"stopped at record {applied} of the run: {error}")
        self.applied = applied
        self.error = error
# Handed the raw properties of each record carrying a timer-state property, in log order.
TimerRecordHandler = Callable[[bytes], None]


class DispatchService(ServiceThread):
    name = "dispatch"

    def __init__(self, commit_log: CommitLog, queues: ConsumeQueues,
                 arrivals: Arrivals | None = None,
                 tombstones: Tombstones | None = None,
                 key_index: KeyIndex | None = None) -> None:
        super().__init__()
        self._commit_log = commit_log
        self._queues = queues
        self._tombstones = tombstones
        self._key_index = key_index
        self.key_index_error: str | None = None
        # Long-poll readers of a queue are woken once its entries are written, not before.
        self._arrivals = arrivals if arrivals is not None else Arrivals(0)
        self.dispatched_offset = 0
        # Start of the last record dispatched (-1: none yet); the checkpoint keeps it.
        self.last_record_offset = -1
        self._topic_names: dict[bytes, str] = {}
        self._dispatch_lock = threading.Lock()
        # DLedger mode: dispatch never reads at or past this commit-log offset (the end of the
        # committed entries); None in the classic modes, where every complete record goes.
        self.limit_offset: int | None = None
        self.failures = DispatchFailures()
        self.on_system_record: SystemRecordHandler | None = None
        # Takes runs of plain metadata records at once (None: one by one, on_system_record).
        self.on_system_run: SystemRunHandler | None = None
        # Operations by a metadata record's raw properties (most are the operation alone).
        self._ops: dict[bytes, str] = {}
        self.on_timer_record: TimerRecordHandler | None = None
        # Waits for the dispatch of everything below an offset (a metadata change answered
        # once applied here); a timeout answers SERVICE_NOT_AVAILABLE.
        self.dispatched_waits = OffsetWaits(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        # Cuts and topic deletes, for readers in other processes (store/shared_reads/).
        self.changes = StoreChanges()

    def stop(self, *, drain: bool = True) -> None:
        super().stop()
        if drain:  # whatever was appended before stop gets its entries
            while self.dispatch_available():
                pass

    @property
    def position(self) -> tuple[int, int]:
        """(dispatched offset, start of the last record before it), read consistently: where
        recovery may restart dispatch. Held back while a queue is failed, so that the next
        start rebuilds it."""
        with self._dispatch_lock:
            current = self.dispatched_offset, self.last_record_offset
        held = self.failures.held_position
        return held if held is not None and held[0] < current[0] else current

    def rewind(self, cut: Callable[[], tuple[int, int]]) -> int:
        """Run `cut` (which removes the log from some offset on, and answers the bytes it
        cleared and where dispatch must start again: that offset, or a record boundary below
        it) with dispatch held still, then dispatch again from there. The start of the record
        before it is not known without a scan, so the next checkpoint (until a record is
        dispatched) makes recovery scan."""
        with self.changes.changing(), self._dispatch_lock:
            cleared_bytes, start = cut()
            if self.dispatched_offset > start:
                self.dispatched_offset = start
                self.last_record_offset = -1
                self.dispatched_waits.rewound(start)
            return cleared_bytes

    def hold_still(self, change: Callable[[], int]) -> int:
        """Run `change` (a cut of the log past what dispatch may read, or a read of state
        dispatch derives) with dispatch held; a caller that changes the store says so with
        `changes.changing()` around it."""
        with self._dispatch_lock:
            return change()

    def at_position(self, read: Callable[[int], bytes]) -> bytes:
        """`read(dispatched offset)` with dispatch held still: state derived by dispatch,
        read together with the offset it covers."""
        with self._dispatch_lock:
            return read(self.dispatched_offset)

    @property
    def behind_bytes(self) -> int:
        return max(0, self._commit_log.max_offset - self.dispatched_offset)

    def run_once(self) -> float:
        return 0.0 if self.dispatch_available() else _IDLE_WAIT_S

    def dispatch_available(self) -> bool:
        """Dispatch every complete record below the max offset; return whether any was."""
        progressed = False
        with self._dispatch_lock:  # one dispatcher at a time: the thread, recovery or a test
            for _ in range(_BATCHES_PER_ROUND_MAX):
                if self._dispatch_batch() == 0:
                    return progressed
                progressed = True
        return progressed

    def dispatch_here(self, records_max: int) -> bool:
        """Dispatch up to `records_max` records on the calling thread, unless another is
        dispatching (then nothing); True when everything dispatchable is dispatched. A
        DLedger member's host calls it at the end of a round for what its commits opened
        (MessageStore's `dispatch_committed`) and wakes this thread only when it returns
        False. Errors
        propagate as in `dispatch_available`."""
        if not self._dispatch_lock.acquire(blocking=False):
            return False
        try:
            while records_max > 0:
                count = self._dispatch_batch(records_max)
                if count == 0:
                    return True
                records_max -= count
            return False
        finally:
            self._dispatch_lock.release()

    def _dispatch_batch(self, records_max: int = _BATCH_RECORDS_MAX) -> int:
        """Parse up to a batch of complete records of one file, then write their entries,
        grouped by queue, one write per queue: parsing is per record, writing is not."""
        offset = self.dispatched_offset
        max_offset = self._commit_log.max_offset
        limit = self.limit_offset
        if limit is not None and limit < max_offset:
            max_offset = limit
        if offset >= max_offset:
            return 0
        mapped = self._commit_log.files.hold_file(offset)
        if mapped is None:
            if offset < self._commit_log.min_offset:  # retention passed us: jump ahead
                self.dispatched_offset = self._commit_log.min_offset
                return 1
            return 0
        try:  # held: retention cannot unmap the file while its records are parsed
            return self._dispatch_file(mapped, offset, max_offset, records_max)
        finally:
            mapped.release()

    def _dispatch_file(self, mapped: MappedFile, offset: int, max_offset: int,
                       records_max: int) -> int:
        batch_start = offset, self.last_record_offset
        base = mapped.start_offset
        limit = min(mapped.write_position, max_offset - base)
        position = offset - base
        buffer = mapped.buffer
        pending: dict[tuple[bytes, int], list[Entry]] = {}
        keyed: list[_Keyed] = []
        count = 0
        last_record = -1
        records_max = min(records_max, _BATCH_RECORDS_MAX)
        # A batch is a run of metadata records (parsed first, then applied in log order) or
        # of other records, never both.
        system: list[_Parsed] = []
        on_timer_record = self.on_timer_record
        while count < records_max and position + 8 <= limit:
            if position + _DISPATCH_FIELDS.size <= limit:
                total_size, magic, queue_id, queue_offset, stored_ms, body_size = (
                    _DISPATCH_FIELDS.unpack_from(buffer, position))
            else:
                total_size, magic = _PREFIX.unpack_from(buffer, position)
                queue_id = queue_offset = stored_ms = body_size = 0
            if magic == BLANK_MAGIC:
                if position + total_size > limit:
                    break  # the rest of the blank has not arrived yet (slave)
                position = mapped.size_bytes  # the rest of the file is blank
                count += 1
                break
            if magic != MESSAGE_MAGIC or total_size < RECORD_OVERHEAD:
                if system:
                    break  # the metadata records before it are applied first
                self._write(pending, batch_start)
                self.dispatched_offset = base + position
                raise RecordError(f"bad record at offset {base + position}")
            if position + total_size > limit:
                break  # the rest of the record has not arrived yet (slave)
            cursor = position + HEADER_SIZE + body_size
            topic_end = cursor + 1 + buffer[cursor]
            key = (buffer[cursor + 1 : topic_end], queue_id)
            if key[0] == METADATA_TOPIC_BYTES:
                if count > len(system):
                    break  # the batch so far is written first; the records go next
                system.append(_Parsed(position, body_size, topic_end, queue_offset, total_size,
                                      key))
                last_record = position
                position += total_size
                count += 1
                continue
            if system:
                break  # a run of metadata records is a batch of its own
            properties_size = buffer[topic_end] << 8 | buffer[topic_end + 1]
            code = 0
            if properties_size:
                properties = buffer[topic_end + 2 : topic_end + 2 + properties_size]
                code = _tags_code_of(properties)
                if _KEYS_PREFIX in properties:
                    keyed.append((key[0], properties, base + position, stored_ms))
                if on_timer_record is not None and _TIMER_STATE_PREFIX in properties:
                    on_timer_record(bytes(properties))
            entries = pending.get(key)
            if entries is None:
                entries = pending[key] = []
            entries.append((queue_offset, base + position, total_size, code))
            last_record = position
            position += total_size
            count += 1
        if system:
            self._apply_system_records(mapped, system, batch_start)
            _add_system_entries(pending, system, base)
        self._end_batch(pending, keyed, batch_start, base, last_record, position)
        return count

    def _end_batch(self, pending: dict[tuple[bytes, int], list[Entry]], keyed: list[_Keyed],
                   batch_start: tuple[int, int], base: int, last_record: int,
                   position: int) -> None:
        """Write the batch's entries and keys, then move dispatch past it (to `position` of
        the file at `base`)."""
        self._write(pending, batch_start)
        self._index_keys(keyed)
        if last_record >= 0:
            self.last_record_offset = base + last_record
        self.dispatched_offset = base + position
        self._advance_waits()

    def _advance_waits(self) -> None:
        if len(self.dispatched_waits):
            self.dispatched_waits.advance(self.dispatched_offset)

    def _apply_system_records(self, mapped: MappedFile, system: list[_Parsed],
                              batch_start: tuple[int, int]) -> None:
        """Apply a batch's metadata records in log order (their queue entries go in with the
        batch, after): a topic delete or a snapshot part one by one, as the store applies its
        part first; runs of the others in one hand-off when the layer takes runs
        (`on_system_run`). When one cannot be applied, dispatch ends the batch at it (past the
        records before it, which are applied) and raises its error."""
        run_handler = self.on_system_run
        applied = 0
        run: list[SystemRecord] = []
        failure: BaseException
        try:
            for item in system:
                record, properties = self._system_record(mapped, item)
                if run_handler is not None and record.op not in _STORE_OPS:
                    run.append(record)
                    continue
                if run:
                    assert run_handler is not None
                    run_handler(run)
                    applied += len(run)
                    run = []
                self._apply_system_record(record, properties)
                applied += 1
            if run:
                assert run_handler is not None
                run_handler(run)
            return
        except SystemRunStopped as stopped:
            applied += stopped.applied
            failure = stopped.error
        except BaseException as error:
            failure = error
        self._stop_system_records(mapped, system, applied, batch_start)
        raise failure

    def _stop_system_records(self, mapped: MappedFile, system: list[_Parsed], applied: int,
                             batch_start: tuple[int, int]) -> None:
        """Dispatch stays at the record `system[applied]`: the ones before it are done."""
        base = mapped.start_offset
        pending: dict[tuple[bytes, int], list[Entry]] = {}
        _add_system_entries(pending, system[:applied], base)
        last_record = system[applied - 1].position if applied else -1
        self._end_batch(pending, [], batch_start, base, last_record, system[applied].position)

    def _system_record(self, mapped: MappedFile, item: _Parsed) -> tuple[SystemRecord, bytes]:
        """A parsed metadata record as the layer gets it, and its raw properties."""
        position, body_size, topic_end, queue_offset = item[:4]
        buffer = mapped.buffer
        properties_size = buffer[topic_end] << 8 | buffer[topic_end + 1]
        properties = bytes(buffer[topic_end + 2 : topic_end + 2 + properties_size])
        op = self._ops.get(properties)
        if op is None:  # the properties of most records are their operation alone: kept
            op = _property_of(properties, _OP_PREFIX) or ""
            if op != OP_TOPIC_DELETE and len(self._ops) < _OPS_MAX:
                self._ops[properties] = op
        body_start = position + HEADER_SIZE
        return SystemRecord(mapped.start_offset + position, queue_offset, op,
                            bytes(buffer[body_start : body_start + body_size])), properties

    def _apply_system_record(self, record: SystemRecord, properties: bytes) -> None:
        """Apply one metadata record: the store's part (a topic delete's tombstone, a
        snapshot's queue starts), then the layer's. Raises when the layer could not."""
        op = record.op
        if op == OP_TOPIC_DELETE:
            topic = _property_of(properties, _SUBJECT_PREFIX)
            if topic:
                self._delete_topic(topic, record.commit_log_offset)
        if op == OP_SNAPSHOT:  # queues this log has no record of start where the master's are
            for topic, start_queue_id, start_offset in queue_starts(op, record.body):
                self._queues.start_at(topic, start_queue_id, start_offset)
        handler = self.on_system_record
        if handler is not None:
            handler(record)

    def _delete_topic(self, topic: str, offset: int) -> None:
        """A topic delete at `offset`: records of the topic below it are dead (durably, before
        any queue goes), and its queues are removed; on every replica, in log order."""
        if self._tombstones is not None:
            self._tombstones.add(topic, offset, self._commit_log.min_offset)
        with self.changes.changing():
            removed = self._queues.remove_topic(topic)
        log.info("dispatch: topic %s deleted at offset %d, %d consume queues removed",
                 topic, offset, removed)

    def _write(self, pending: dict[tuple[bytes, int], list[Entry]],
               batch_start: tuple[int, int]) -> None:
        """Write each queue's entries; a queue that fails is set aside (DispatchFailures),
        the others are written all the same."""
        for (raw_topic, queue_id), entries in pending.items():
            topic = self._topic_names.get(raw_topic)
            if topic is None:
                topic = raw_topic.decode("utf-8")
                if len(self._topic_names) < _TOPIC_NAMES_MAX:
                    self._topic_names[raw_topic] = topic
            if self.failures.is_failed(topic, queue_id):
                continue  # rebuilt from the held position at the next start
            if self._tombstones:
                entries = _live(entries, self._tombstones.dead_below(topic))
                if not entries:
                    continue
            try:
                queue = self._put_with_attempts(topic, queue_id, entries)
            except OSError as error:
                self.failures.record(topic, queue_id, error, batch_start)
            else:
                self._arrivals.notify(topic, queue_id, queue.max_queue_offset)

    def _index_keys(self, keyed: list[_Keyed]) -> None:
        """Add the keys of the batch's records to the key index, in log order (records of
        a deleted topic's older incarnation excepted)."""
        if self._key_index is None or self.key_index_error is not None:
            return
        for raw_topic, properties, offset, stored_ms in keyed:
            topic = self._topic_names.get(raw_topic) or raw_topic.decode("utf-8")
            if self._tombstones and offset < self._tombstones.dead_below(topic):
                continue
            keys = _property_of(properties, _KEYS_PREFIX)
            if not keys:
                continue
            try:
                self._key_index.add(topic, keys.split(" "), offset, stored_ms)
            except OSError as error:
                # A new index file could not be made (a full disk): the consume queues go
                # on; the index stops here until the next start, which indexes again from
                # what its files cover (when it has none, the records now are not indexed).
                self.key_index_error = f"{type(error).__name__}: {error}"
                log.error("dispatch: the key index stopped at offset %d: %s", offset, error)
                return

    def _put_with_attempts(self, topic: str, queue_id: int,
                           entries: list[Entry]) -> ConsumeQueue:
        for attempt in range(1, WRITE_ATTEMPTS_MAX + 1):
            try:
                queue = self._queues.get_or_create(topic, queue_id)
                queue.put_many(entries)
                return queue
            except OSError as error:
                if attempt == WRITE_ATTEMPTS_MAX:
                    raise
                log.warning("dispatch: writing consume queue %s/%d failed (%s); closing idle "
                            "queues and trying again", topic, queue_id, error)
                self._queues.close_idle()  # frees descriptors when they ran out
        raise AssertionError("unreachable: the last attempt returns or raises")


def _live(entries: list[Entry], dead_below_offset: int) -> list[Entry]:
    """The entries of records stored after their topic was last deleted."""
    if not dead_below_offset:
        return entries
    return [entry for entry in entries if entry[1] >= dead_below_offset]


def _tags_code_of(properties: bytes) -> int:
    tags = _property_of(properties, _TAGS_PREFIX)
    return 0 if tags is None else tags_code(tags)


def _property_of(properties: bytes, prefix: bytes) -> str | None:
    """The value of the property `prefix` names ("NAME\x01"), or None."""
    start = 0 if properties.startswith(prefix) else properties.find(b"\x02" + prefix)
    if start < 0:
        return None
    if start > 0:
        start += 1
    start += len(prefix)
    end = properties.find(_SEPARATOR, start)
    return properties[start : end if end >= 0 else len(properties)].decode("utf-8", "replace")
