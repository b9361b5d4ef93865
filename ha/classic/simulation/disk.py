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
- Consume queues are built by a dispatch that follows the log, cut back with it, and rebuilt
  by recovery: queue entries always name whole records of the log.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ha.classic.core.epochs import Epoch
from store.status import AppendRawStatus

FILE_SIZE_BYTES = 4096
_HEADER = struct.Struct(">IIB")  # total size, message id (0: a blank), queue id
HEADER_SIZE = _HEADER.size
BLANK_ID = 0


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    size: int
    message_id: int  # BLANK_ID for a blank
    queue_id: int


def encode_record(message_id: int, queue_id: int, payload_size: int) -> bytes:
    """A record whose payload repeats its id's low byte (a cut or a shift shows)."""
    size = HEADER_SIZE + payload_size
    return _HEADER.pack(size, message_id, queue_id) + bytes([message_id % 251]) * payload_size


def parse_records(data: bytes | bytearray, start: int, end: int,
                  records_max: int = 1 << 30) -> tuple[list[Record], int]:
    """The whole records in data[start:end) (at most `records_max`) and where the last one
    ends (a torn tail is left out). A record's payload must be its own: its first and last
    bytes are checked (a record written over another, or shifted, shows there)."""
    records: list[Record] = []
    offset = start
    while end - offset >= HEADER_SIZE and len(records) < records_max:
        size, message_id, queue_id = _HEADER.unpack_from(data, offset)
        if size < HEADER_SIZE or offset + size > end:
            break
        if message_id != BLANK_ID and size > HEADER_SIZE:
            fill = message_id % 251
            assert data[offset + HEADER_SIZE] == fill and data[offset + size - 1] == fill, (
                f"record {message_id} at {offset} is damaged")
        records.append(Record(offset, size, message_id, queue_id))
        offset += size
    return records, offset


@dataclass
class SimDisk:
    data: bytearray = field(default_factory=bytearray)  # the log from offset 0
    min_offset: int = 0  # retention removed [0, min_offset)
    flushed_end: int = 0
    epochs: list[Epoch] = field(default_factory=list)
    # Consume queues: queue id -> record offsets; dispatch has read the log up to here.
    queues: dict[int, list[int]] = field(default_factory=dict)
    dispatched_end: int = 0

    @property
    def end(self) -> int:
        return len(self.data)

    @property
    def is_empty(self) -> bool:
        return self.end == self.min_offset

    # -- writes ----------------------------------------------------------------------------

    def append_record(self, message_id: int, queue_id: int, payload_size: int) -> tuple[int, int]:
        """A master's put: [start, end) of the record, after a blank if it must roll."""
        record = encode_record(message_id, queue_id, payload_size)
        assert len(record) + HEADER_SIZE <= FILE_SIZE_BYTES
        remaining = FILE_SIZE_BYTES - self.end % FILE_SIZE_BYTES
        if len(record) + HEADER_SIZE > remaining:
            self.data += _HEADER.pack(remaining, BLANK_ID, 0) + bytes(remaining - HEADER_SIZE)
        start = self.end
        self.data += record
        return start, self.end

    def append_raw(self, offset: int, body: bytes) -> AppendRawStatus:
        """The slave's write (the store's `append_raw`)."""
        if self.is_empty and offset % FILE_SIZE_BYTES == 0:
            self.data = bytearray(offset)  # an empty log starts wherever the master's does
            self.min_offset = self.flushed_end = self.dispatched_end = offset
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
        """Cut back to `offset`, durably; queues follow. Below the first byte held, every
        file goes and the log is empty (at 0), as the store's. Returns the bytes cleared."""
        assert offset <= self.end, (offset, self.end)
        if offset < self.min_offset:
            cleared = self.end - self.min_offset
            self.data = bytearray()
            self.min_offset = self.flushed_end = 0
            self.queues = {}
            self.dispatched_end = 0
            return cleared
        cleared = self.end - offset
        del self.data[offset:]
        self.flushed_end = min(self.flushed_end, offset)
        self._cut_queues(offset)
        return cleared

    def retain_from(self, offset: int) -> None:
        """Retention removes whole files below `offset` (a file start)."""
        assert offset % FILE_SIZE_BYTES == 0 and self.min_offset <= offset <= self.end
        self.min_offset = offset
        self.flushed_end = max(self.flushed_end, offset)  # no power cut reaches a file gone
        for queue in self.queues.values():
            queue[:] = [entry for entry in queue if entry >= offset]
        self.dispatched_end = max(self.dispatched_end, offset)

    # -- crashes ---------------------------------------------------------------------------

    def lose_unflushed(self, surviving_end: int) -> None:
        """A power cut: the log survives up to `surviving_end` (at or past the flushed
        offset); recovery then cuts the torn tail."""
        assert self.flushed_end <= surviving_end <= self.end
        del self.data[surviving_end:]

    def recover(self) -> int:
        """Crash recovery: cut the log to its last whole record and rebuild the queues from
        it. Returns the recovered end."""
        _, end = parse_records(self.data, self.min_offset, self.end)
        del self.data[end:]
        self.flushed_end = min(self.flushed_end, end)
        self.queues = {}
        self.dispatched_end = self.min_offset
        self.dispatch()
        return end

    # -- consume queues --------------------------------------------------------------------

    def dispatch(self) -> None:
        """Give every whole record past the dispatched end its queue entry."""
        records, end = parse_records(self.data, self.dispatched_end, self.end)
        for record in records:
            if record.message_id != BLANK_ID:
                self.queues.setdefault(record.queue_id, []).append(record.offset)
        self.dispatched_end = end

    def _cut_queues(self, offset: int) -> None:
        for queue in self.queues.values():
            while queue and queue[-1] >= offset:
                queue.pop()
        self.dispatched_end = min(self.dispatched_end, offset)

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
