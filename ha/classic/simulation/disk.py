"""A broker's disk in the classic-replication simulation: its commit log, what of it is
flushed, its epoch file, and its consume queues, with the real store's write rules.

- Records never span a file of FILE_SIZE_BYTES: a record that does not fit with room for a
  blank is preceded by a blank to the file's end (the store's END_FILE blank), so a file's
  start is always a record's start, and retention removes whole files.
- `append_raw` is the slave's write: bytes at exactly the log's end, or, into an empty log,
  at any file start (an empty slave takes the retained history from the master's min offset).
- A kill keeps the page cache: recovery only cuts a torn tail back to the last whole record.
  A power cut also loses what was not flushed: the log survives up to some point at or past
  the flushed offset, then recovery cuts it to a record boundary.
- Cutting back (a slave agreeing with its master) is durable at once, as the store's
  `truncate_log`; the epoch file is written atomically (durable) too.
- Consume queues are built by a dispatch that follows the log, cut back with it, and cut to
  what recovery kept: queue entries always name whole records of the log. Records carry their
  topic, queue and queue offset; dispatch applies a metadata record (metadata.py) and turns a
  topic delete into a tombstone (durable, kept across cuts, as store/tombstones.py's) that
  removes the topic's queues and keeps its older records out of them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from ha.classic.core.epochs import Epoch
from ha.classic.simulation.metadata import EMPTY_STATE, MetadataState, SimMetadata, decoded
from ha.sim_timers import TimerModel
from store.metadata.log_records import (
    OP_GROUP_DELETE,
    OP_GROUP_PUT,
    OP_OFFSET_SET,
    OP_TOPIC_PUT,
    OP_TOPICS_PUT,
    MetadataSnapshot,
    OffsetSet,
    QueueStart,
    TopicDelete,
    snapshot_parts,
)
from store.status import AppendRawStatus
from store.system_topics import OP_SNAPSHOT, OP_TOPIC_DELETE, queue_starts

FILE_SIZE_BYTES = 4096
# total size, message id (0: a blank), topic (0: the metadata topic), queue id, operation (0: a
# message; else the metadata operation's index in OPS plus one), queue offset
_HEADER = struct.Struct(">IIBBBI")
HEADER_SIZE = _HEADER.size
BLANK_ID = 0
METADATA_TOPIC = 0  # its records are in its queue 0
TOPICS = ("t1", "t2", "t3")  # topic code n is TOPICS[n - 1]
# Delayed messages' records (ha/sim_timers.py): lane entries in their lane's queue, deliveries
# in DELIVERED_QUEUE_ID; their body is the record.
TIMER_TOPIC = 9
TIMER_OP = "timer"
DELIVERED_QUEUE_ID = 200
OPS = (OP_TOPIC_PUT, OP_TOPICS_PUT, OP_TOPIC_DELETE, OP_GROUP_PUT, OP_GROUP_DELETE,
       OP_OFFSET_SET, OP_SNAPSHOT, TIMER_OP)
# Small parts, so that snapshots of a few topics and groups take several records.
SNAPSHOT_PART_BYTES_MAX = 700


def topic_code(name: str) -> int:
    return TOPICS.index(name) + 1


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    size: int
    message_id: int  # BLANK_ID for a blank
    topic: int
    queue_id: int
    op: str  # "" for a message
    queue_offset: int

    @property
    def is_metadata(self) -> bool:
        return self.topic == METADATA_TOPIC and self.message_id != BLANK_ID


def encode_record(message_id: int, topic: int, queue_id: int, queue_offset: int,
                  payload_size: int, op: str = "", body: bytes = b"") -> bytes:
    """A record whose payload starts and ends with its id's low byte (a cut or a shift shows):
    a message's payload is that byte repeated; a metadata record's is its body between two."""
    fill = bytes([message_id % 251])
    payload = fill + body + fill if op else fill * payload_size
    op_code = OPS.index(op) + 1 if op else 0
    return _HEADER.pack(HEADER_SIZE + len(payload), message_id, topic, queue_id, op_code,
                        queue_offset) + payload


def parse_records(data: bytes | bytearray, start: int, end: int,
                  records_max: int = 1 << 30) -> tuple[list[Record], int]:
    """The whole records in data[start:end) (at most `records_max`) and where the last one
    ends (a torn tail is left out). A record's payload must be its own: its first and last
    bytes are checked (a record written over another, or shifted, shows there)."""
    records: list[Record] = []
    offset = start
    while end - offset >= HEADER_SIZE and len(records) < records_max:
        size, message_id, topic, queue_id, op_code, queue_offset = _HEADER.unpack_from(
            data, offset)
        if size < HEADER_SIZE or offset + size > end:
            break
        if message_id != BLANK_ID and size > HEADER_SIZE:
            fill = message_id % 251
            assert data[offset + HEADER_SIZE] == fill and data[offset + size - 1] == fill, (
                f"record {message_id} at {offset} is damaged")
        records.append(Record(offset, size, message_id, topic, queue_id,
                              OPS[op_code - 1] if op_code else "", queue_offset))
        offset += size
    return records, offset


def body_of(data: bytes | bytearray, record: Record) -> bytes:
    """A metadata or timer record's body."""
    return bytes(data[record.offset + HEADER_SIZE + 1:record.offset + record.size - 1])


@dataclass
class Queue:
    """A consume queue: the record offsets of queue offsets first, first + 1, ..."""

    first: int
    entries: list[int] = field(default_factory=list)

    @property
    def next_offset(self) -> int:
        return self.first + len(self.entries)

    def pairs(self, low: int = 0) -> list[tuple[int, int]]:
        """(queue offset, record offset) of the entries at or past log offset `low`."""
        return [(self.first + index, offset) for index, offset in enumerate(self.entries)
                if offset >= low]


@dataclass
class SimDisk:
    data: bytearray = field(default_factory=bytearray)  # the log from offset 0
    min_offset: int = 0  # retention removed [0, min_offset)
    flushed_end: int = 0
    epochs: list[Epoch] = field(default_factory=list)
    # Consume queues: (topic, queue id) -> its queue; dispatch has read the log up to here.
    queues: dict[tuple[int, int], Queue] = field(default_factory=dict)
    dispatched_end: int = 0
    # topic -> the offsets of its delete records dispatched, ascending: its records below the
    # last are dead (store/tombstones.py: durable; a cut or a recovery that loses a deletion
    # forgets it and re-indexes the topic's records from the deletion before).
    tombstones: dict[int, list[int]] = field(default_factory=dict)
    # The commit-log offset of the last metadata record handed to the tables (-1: none):
    # store/system_feed.py's, which resets and feeds the tables again when a cut removes it.
    handed_offset: int = -1
    metadata: SimMetadata = field(default_factory=SimMetadata)
    # What the metadata records below `min_offset` said (retention removed them), and each
    # queue's next queue offset there (what the master's counters said at that offset).
    metadata_base: MetadataState = EMPTY_STATE
    queue_base: dict[tuple[int, int], int] = field(default_factory=dict)
    # (offset, topic) of each topic delete record the log holds, dispatched, in log order
    deletes: list[tuple[int, int]] = field(default_factory=list)
    changed: bool = False  # queues cut or removed since the invariants last looked
    # How often the log lost metadata records the tables had applied (a cut back, a power
    # cut): the real metadata layer does not follow such a loss (docs/replication.md), so
    # from then on the tables may hold what the log does not; `lenient` then takes queue
    # offsets as they come.
    metadata_lost: int = 0
    lenient: bool = False
    # Whether the log started at a master's retained min offset: it has no queue of a topic
    # whose records there all lie below that offset.
    started_mid_log: bool = False
    # Delayed messages, as dispatch derives them from the log (the product's TimerState):
    # rebuilt from the log when a cut or a recovery takes records back.
    timers: TimerModel = field(default_factory=TimerModel)

    @property
    def end(self) -> int:
        return len(self.data)

    @property
    def is_empty(self) -> bool:
        return self.end == self.min_offset

    # -- writes ----------------------------------------------------------------------------

    def next_queue_offset(self, topic: int, queue_id: int) -> int:
        """The master's next queue offset (its commit log's table: a topic delete forgets
        the topic's, so its next incarnation starts at 0)."""
        queue = self.queues.get((topic, queue_id))
        return 0 if queue is None else queue.next_offset

    def append_record(self, message_id: int, topic: int, queue_id: int, payload_size: int,
                      op: str = "", body: bytes = b"") -> tuple[int, int]:
        """A master's put: [start, end) of the record, after a blank if it must roll."""
        record = encode_record(message_id, topic, queue_id,
                               self.next_queue_offset(topic, queue_id), payload_size, op, body)
        assert len(record) + HEADER_SIZE <= FILE_SIZE_BYTES
        remaining = FILE_SIZE_BYTES - self.end % FILE_SIZE_BYTES
        if len(record) + HEADER_SIZE > remaining:
            self.data += _HEADER.pack(remaining, BLANK_ID, 0, 0, 0, 0) + bytes(
                remaining - HEADER_SIZE)
        start = self.end
        self.data += record
        return start, self.end
    def append_raw(self, offset: int, body: bytes) -> AppendRawStatus:
        """The slave's write (the store's `append_raw`)."""
        if self.is_empty and offset % FILE_SIZE_BYTES == 0:
            self.data = bytearray(offset)  # an empty log starts wherever the master's does
            self.min_offset = self.flushed_end = self.dispatched_end = offset
            self.started_mid_log = offset > 0
        elif offset != self.end:
            return AppendRawStatus.OFFSET_MISMATCH
        if len(body) > FILE_SIZE_BYTES - offset % FILE_SIZE_BYTES:
            return AppendRawStatus.SPANS_FILES
        self.data += body
        return AppendRawStatus.OK

    def flush(self) -> int:
        self.flushed_end = self.end
        return self.flushed_end

    def truncate(self, offset: int) -> int:
        """Cut back to `offset`, durably (the store's `truncate_log`): queues, dispatch and the
        tombstones follow, and when the cut removed a record the tables applied, they are
        reset and fed the records left (store/system_feed.py). Below the first byte held,
        every file goes and the log is empty (at 0), as the store's. Returns the bytes
        cleared."""
        assert offset <= self.end, (offset, self.end)
        if offset < self.min_offset:
            cleared = self.end - self.min_offset
            self.data = bytearray()
            self.min_offset = self.flushed_end = 0
            self.queues = {}
            self.dispatched_end = 0
            self.metadata_base = EMPTY_STATE
            self.queue_base = {}
            self.deletes = []
            self.tombstones = {}
            self.changed = True
            self._feed_after_cut(0, cleared_all=True)
            self.timers = TimerModel()
            return cleared
        cleared = self.end - offset
        del self.data[offset:]
        self.flushed_end = min(self.flushed_end, offset)
        self._cut_queues(offset)
        self._feed_after_cut(offset, cleared_all=False)
        if cleared:
            self._rebuild_timers()
        return cleared

    def _rebuild_timers(self) -> None:
        """The product's reset of the timer state after a cut: redispatched from the log's
        first record."""
        self.timers = TimerModel()
        records, _ = parse_records(self.data, self.min_offset, self.dispatched_end)
        for record in records:
            if record.topic == TIMER_TOPIC and record.message_id != BLANK_ID:
                self.timers.apply(body_of(self.data, record), record.queue_offset,
                                  record.offset)

    def _feed_after_cut(self, offset: int, cleared_all: bool) -> None:
        if self.handed_offset >= offset:
            self._rebuild_metadata()
        elif cleared_all and self.metadata.state() != EMPTY_STATE:
            self.metadata_lost += 1  # a bootstrap's tables, no record fed since: they stay

    def retain_from(self, offset: int) -> None:
        """Retention removes whole files below `offset` (a file start); what their metadata
        records said stays as the base of what the log says."""
        assert offset % FILE_SIZE_BYTES == 0 and self.min_offset <= offset <= self.end
        base = SimMetadata.of(self.metadata_base)
        records, _ = parse_records(self.data, self.min_offset, min(offset, self.dispatched_end))
        for record in records:
            if record.is_metadata:
                base.apply_record(record.queue_offset, record.op, body_of(self.data, record))
                change = decoded(record.op, body_of(self.data, record))
                if isinstance(change, TopicDelete):
                    gone = topic_code(change.name)
                    self.queue_base = {key: next_offset for key, next_offset
                                       in self.queue_base.items() if key[0] != gone}
            elif record.message_id != BLANK_ID:
                self.queue_base[(record.topic, record.queue_id)] = record.queue_offset + 1
        self.metadata_base = base.state()
        self.min_offset = offset
        self.flushed_end = max(self.flushed_end, offset)  # no power cut reaches a file gone
        for queue in self.queues.values():
            gone = 0
            while gone < len(queue.entries) and queue.entries[gone] < offset:
                gone += 1
            del queue.entries[:gone]
            queue.first += gone
        self.dispatched_end = max(self.dispatched_end, offset)
        self.timers.retain_from(offset)
        self.changed = True

    def bootstrap_metadata(self, base: MetadataState,
                           queue_base: dict[tuple[int, int], int]) -> None:
        """Slave sync's bootstrap (app/broker/slave_sync.py) for an empty log about to start at
        its master's min offset: every queue starts at the master's next queue offset there
        (a queue whose records all lie below has no entry here, yet keeps its offsets); when
        its applied position is below the master's records, the master's tables as its
        retained records' base says, offsets clamped to this log's own queues (a clamp that
        takes something counts as lost metadata)."""
        self.queue_base = dict(queue_base)
        for (topic, queue_id), next_offset in queue_base.items():
            self.queues[(topic, queue_id)] = Queue(next_offset)
        if self.metadata.applied_queue_offset >= base.applied_queue_offset:
            self.metadata_base = base
            return
        clamped = replace(base, offsets=tuple(
            (key, min(offset, self.next_queue_offset(topic_code(key[1]), key[2])))
            for key, offset in base.offsets))
        if clamped != base:
            self.metadata_lost += 1
        self.metadata_base = clamped
        self.metadata.load(clamped)

    # -- crashes ---------------------------------------------------------------------------

    def lose_unflushed(self, surviving_end: int) -> None:
        """A power cut: the log survives up to `surviving_end` (at or past the flushed
        offset); recovery then cuts the torn tail."""
        assert self.flushed_end <= surviving_end <= self.end
        del self.data[surviving_end:]

    def recover(self) -> int:
        """Crash recovery: cut the log to its last whole record, the queues with it, and
        dispatch what is left (the metadata is not attached yet); then the metadata restarts
        from what it persisted and catches up with the log. Returns the recovered end."""
        _, end = parse_records(self.data, self.min_offset, self.end)
        queue = self.queues.get((METADATA_TOPIC, 0))
        lost_applied = bool(queue and queue.entries and queue.entries[-1] >= end)
        del self.data[end:]
        self.flushed_end = min(self.flushed_end, end)
        self._cut_queues(end)
        self.dispatch(apply=False)
        self._rebuild_timers()  # saved state ahead of the log, or redispatched: the same
        self.metadata.restart()
        self.handed_offset = -1
        applied = self.metadata.applied_queue_offset
        if applied > 0 and self._offset_at(applied - 1) != self.metadata.persisted_offset:
            self._rebuild_metadata()  # the last record the tables applied is not in the log
            return end
        if lost_applied:
            # Open: rows applied after the last persist, of records the log lost, stay.
            self.metadata_lost += 1
        if applied < self.metadata_base.applied_queue_offset:
            # Retention removed records not applied yet: the log's snapshot rebuilds them.
            self._rebuild_metadata()
            return end
        self.handed_offset = self.metadata.persisted_offset if applied > 0 else -1
        self._feed(applied)
        return end

    def _offset_at(self, queue_offset: int) -> int | None:
        queue = self.queues.get((METADATA_TOPIC, 0))
        if queue is None or not queue.first <= queue_offset < queue.next_offset:
            return None
        return queue.entries[queue_offset - queue.first]

    def _rebuild_metadata(self) -> None:
        """SystemRecordFeed._rebuild: the tables reset and fed every record the log holds;
        with retention past the first ones, what only those held is missing (counted)."""
        self.handed_offset = -1
        if self.metadata_base != EMPTY_STATE and self.latest_snapshot() is None:
            # A log that began at its master's min offset and holds no snapshot yet: slave
            # sync's bootstrap again (its position is below the master's records), then the
            # records past it.
            self.metadata.load(self.metadata_base)
            self._feed(self.metadata_base.applied_queue_offset)
            return
        self.metadata.reset()
        self._feed(0)

    def _feed(self, from_queue_offset: int) -> None:
        """The metadata records from `from_queue_offset` on, handed to the tables."""
        queue = self.queues.get((METADATA_TOPIC, 0))
        if queue is None:
            return
        for queue_offset, offset in queue.pairs():
            if queue_offset >= from_queue_offset:
                record = self.record_at(offset)
                assert record is not None and record.is_metadata, (offset, record)
                self.metadata.apply_record(record.queue_offset, record.op,
                                           body_of(self.data, record), offset)
                self.handed_offset = offset

    # -- dispatch --------------------------------------------------------------------------

    def dispatch(self, apply: bool = True, end: int | None = None) -> None:
        """Every whole record past the dispatched end (up to `end`): a message gets its queue
        entry unless its topic was deleted after it; a metadata record is applied (a topic
        delete first leaves its tombstone and removes the topic's queues), then its entry."""
        records, end = parse_records(self.data, self.dispatched_end,
                                     self.end if end is None else end)
        for record in records:
            if record.message_id == BLANK_ID:
                continue
            if record.is_metadata:
                body = body_of(self.data, record)
                if record.op == OP_TOPIC_DELETE:
                    self._delete_topic(decoded(record.op, body), record.offset)
                for topic, queue_id, next_offset in queue_starts(record.op, body):
                    self._start_queue((topic_code(topic), queue_id), next_offset)
                if apply:
                    self.metadata.apply_record(record.queue_offset, record.op, body,
                                               record.offset)
                    self.handed_offset = record.offset
            elif record.offset < self._dead_below(record.topic):
                continue
            elif record.topic == TIMER_TOPIC:
                self.timers.apply(body_of(self.data, record), record.queue_offset,
                                  record.offset)
            self._enqueue(self.queues, record, self.lenient)
        self.dispatched_end = end

    def _start_queue(self, key: tuple[int, int], next_offset: int) -> None:
        """A snapshot's queue start (the store's ConsumeQueues.start_at): a queue this log has
        no entry of starts there; one with entries must be there already."""
        queue = self.queues.get(key)
        if queue is None or not queue.entries:
            self.queues[key] = Queue(next_offset)
        elif not self.lenient:
            assert queue.next_offset == next_offset, (
                f"snapshot starts queue {key} at {next_offset}, its next is {queue.next_offset}")

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_parts(self) -> list[MetadataSnapshot]:
        """The master's snapshot of its tables and queues, as records to append now."""
        metadata = self.metadata
        offsets = [OffsetSet(o.group_name, o.topic, o.queue_id, o.queue_offset, True,
                             o.updated_at_ms) for o in metadata.offsets.select()]
        queues = [QueueStart(TOPICS[topic - 1], queue_id, queue.next_offset)
                  for (topic, queue_id), queue in sorted(self.queues.items())
                  if topic not in (METADATA_TOPIC, TIMER_TOPIC)]  # user queues, as the broker
        return snapshot_parts(sorted(metadata.topics.values(), key=lambda t: t.name),
                              sorted(metadata.groups.values(), key=lambda g: g.name),
                              offsets, queues, SNAPSHOT_PART_BYTES_MAX)

    def latest_snapshot(self, end: int | None = None) -> int | None:
        """The offset of the last whole snapshot (its part 0) the dispatched log holds (below
        `end`)."""
        latest = start = None
        expected = 0
        for record in self.metadata_records(self.min_offset, min(
                self.dispatched_end if end is None else end, self.end)):
            if record.op != OP_SNAPSHOT:
                continue
            change = decoded(record.op, body_of(self.data, record))
            assert isinstance(change, MetadataSnapshot)
            if change.part == 0:
                start, expected = record.offset, 0
            if start is None or change.part != expected:
                start = None
                continue
            expected += 1
            if expected == change.parts:
                latest, start = start, None
        return latest

    def needs_snapshot_before(self, offset: int) -> bool:
        """Whether retention up to `offset` would remove metadata records that no snapshot
        at or past `offset` stands for (the master then writes one first)."""
        if self.metadata_base == EMPTY_STATE and next(
                self.metadata_records(self.min_offset, offset), None) is None:
            return False
        latest = self.latest_snapshot()
        return latest is None or latest < offset

    def _delete_topic(self, change: object, offset: int) -> None:
        assert isinstance(change, TopicDelete), change
        topic = topic_code(change.name)
        self.deletes.append((offset, topic))
        self.changed = True
        history = self.tombstones.setdefault(topic, [])
        if not history or offset > history[-1]:
            history.append(offset)
        for key in [key for key in self.queues if key[0] == topic]:
            del self.queues[key]

    @staticmethod
    def _enqueue(queues: dict[tuple[int, int], Queue], record: Record,
                 lenient: bool = False) -> None:
        queue = queues.get((record.topic, record.queue_id))
        # An empty queue takes its first entry where it comes (the store's consume queue fills
        # the gap: a log cut to nothing that starts again at its master's min offset).
        if queue is None or (not queue.entries and record.queue_offset > queue.first) or (
                lenient and record.queue_offset != queue.next_offset):
            queues[(record.topic, record.queue_id)] = Queue(record.queue_offset, [record.offset])
            return
        assert record.queue_offset == queue.next_offset, (
            f"record at {record.offset} has queue offset {record.queue_offset} in queue "
            f"{record.topic}/{record.queue_id}, whose next is {queue.next_offset}")
        queue.entries.append(record.offset)

    def _dead_below(self, topic: int) -> int:
        history = self.tombstones.get(topic)
        return history[-1] if history else 0

    def _cut_queues(self, offset: int) -> None:
        """Queues and deletions cut back to `offset`; a topic whose deletion went is live
        again from the deletion before: its queues are indexed again from the log."""
        self.changed = True
        while self.deletes and self.deletes[-1][0] >= offset:
            self.deletes.pop()
        for queue in self.queues.values():
            while queue.entries and queue.entries[-1] >= offset:
                queue.entries.pop()
        self.dispatched_end = min(self.dispatched_end, offset)
        revived = [topic for topic, history in self.tombstones.items() if history[-1] >= offset]
        for topic in revived:
            kept = [at for at in self.tombstones[topic] if at < offset]
            if kept:
                self.tombstones[topic] = kept
            else:
                del self.tombstones[topic]
            for key in [key for key in self.queues if key[0] == topic]:
                del self.queues[key]
        if revived:
            # Indexed again as from the log's start: the queues it began with, the snapshots'
            # queue starts, then the records live past their topic's last deletion.
            for (topic, queue_id), next_offset in self.queue_base.items():
                if topic in revived and self._dead_below(topic) < self.min_offset:
                    self.queues[(topic, queue_id)] = Queue(next_offset)
            records, _ = parse_records(self.data, self.min_offset, self.dispatched_end)
            for record in records:
                if record.is_metadata:
                    for name, queue_id, next_offset in queue_starts(
                            record.op, body_of(self.data, record)):
                        if topic_code(name) in revived and \
                                record.offset >= self._dead_below(topic_code(name)):
                            self._start_queue((topic_code(name), queue_id), next_offset)
                elif record.topic in revived and record.message_id != BLANK_ID and \
                        record.offset >= self._dead_below(record.topic):
                    self._enqueue(self.queues, record, self.lenient)

    def metadata_records(self, start: int, end: int) -> Iterator[Record]:
        records, _ = parse_records(self.data, start, end)
        return (record for record in records if record.is_metadata)

    def what_the_log_says(self, end: int | None = None
                          ) -> tuple[MetadataState, dict[tuple[int, int], list[tuple[int, int]]]]:
        """The tables and queues a broker that dispatched this log from its first byte to
        `end` (its dispatched end) would hold: its metadata records applied in order over the
        base, its messages in their queues unless their topic's delete follows them."""
        # A whole snapshot in the log stands for everything before it (its part 0 replaces
        # the tables): the base of what retention removed then matters no more.
        end = self.dispatched_end if end is None else end
        base = EMPTY_STATE if self.latest_snapshot(end) is not None else self.metadata_base
        scratch = SimDisk(self.data, self.min_offset, dispatched_end=self.min_offset,
                          metadata=SimMetadata.of(base), lenient=self.lenient,
                          queues={key: Queue(next_offset)
                                  for key, next_offset in self.queue_base.items()})
        scratch.dispatch(end=end)
        return scratch.metadata.state(), _pairs(scratch.queues)

    def queue_pairs(self, low: int = 0) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """Each queue's (queue offset, record offset) entries at or past `low`, none empty."""
        return _pairs(self.queues, low)

    def record_at(self, offset: int) -> Record | None:
        """The whole record starting at `offset`, when the log holds one there."""
        if not self.min_offset <= offset < self.end:
            return None
        records, _ = parse_records(self.data, offset, self.end, records_max=1)
        return records[0] if records else None

    def holds(self, start: int, payload: bytes) -> bool:
        """Whether the log holds exactly these bytes at `start`."""
        return (self.min_offset <= start and start + len(payload) <= self.end
                and self.data[start:start + len(payload)] == payload)


def _pairs(queues: dict[tuple[int, int], Queue],
           low: int = 0) -> dict[tuple[int, int], list[tuple[int, int]]]:
    found = {key: queue.pairs(low) for key, queue in queues.items()}
    return {key: pairs for key, pairs in found.items() if pairs}
