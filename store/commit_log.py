"""The commit log: every message of every topic, appended to one log of mapped files.

Appends (one message, a batch, or raw replicated bytes) happen under one lock; reads do not
take it: a reader only looks below the write position, which moves after the bytes are in.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from store.config import StoreConfig
from store.errors import OffsetNotAvailableError
from store.files.disk import REAL_DISK, Disk
from store.files.mapped_file import MappedFile
from store.files.mapped_file_queue import MappedFileQueue
from store.record import (
    END_FILE_MIN_BLANK_LENGTH,
    Message,
    RecordError,
    RecordHead,
    StoredMessage,
    decode_head,
    decode_head_having,
    decode_record,
    encode_blank,
    encode_message,
)
from store.status import AppendRawStatus, PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)

_Decoded = TypeVar("_Decoded", StoredMessage, RecordHead)


@dataclass(frozen=True, slots=True)
class TransferSource:
    """A byte range inside one commit-log file, ready for `os.sendfile`.

    It holds the file until `release()` (or the end of its `with` block): retention cannot
    close the fd under a blocked sendfile and hand its number to the next `open()`.
    """

    mapped: MappedFile
    file_position: int
    offset: int
    size_bytes: int

    @property
    def fd(self) -> int:
        return self.mapped.fd

    def release(self) -> None:
        self.mapped.release()

    def __enter__(self) -> TransferSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class CommitLog:
    def __init__(self, config: StoreConfig, on_append: Callable[[], None],
                 disk: Disk = REAL_DISK) -> None:
        self._config = config
        self._files = MappedFileQueue(config.data_dir / "commitlog", config.mapped_file_size_bytes,
                                      disk, free_bytes_kept=config.disk_reserve_bytes)
        self._lock = threading.Lock()
        self._on_append = on_append
        self._store_host = config.store_host_bytes
        self._record_size_max = config.mapped_file_size_bytes - END_FILE_MIN_BLANK_LENGTH
        # Next queue offset per (topic, queue id); rebuilt from the consume queues at recovery.
        self._queue_offsets: dict[tuple[str, int], int] = {}
        # Per queue, the queue offset below which consume-queue entries have their blocks
        # (ConsumeQueues.reserve_for, set by the store): a put past it reserves more first,
        # and a full disk refuses the put instead of leaving it unindexed.
        self._queue_reserved: dict[tuple[str, int], int] = {}
        # Reservations that covered only the put's own entry: its queue file lies past the
        # last one, which dispatch has not filled (dispatch behind by a queue file), so each
        # such put takes the queue's lock. Counted so an operator can see the slow path.
        self.single_entry_reservation_count = 0
        self.reserve_queue: Callable[[str, int, int], int] | None = None
        self._round_robin: dict[str, Iterator[int]] = {}
        self._queue_counts: dict[str, int] = {}
        # The file appends go to, cached: looked up under the lock on every put otherwise.
        self._last_file: MappedFile | None = None
        # Why the last attempt to create a file failed (ENOSPC...), None once one works.
        self.create_file_error: str | None = None
        # A seam for tests: called while a reader holds a file and a view of it (retention
        # can be run there, deterministically, between a reader's hold and its release).
        self.read_seam: Callable[[MappedFile], None] | None = None
        # Raised by every truncation (and delete_all): offsets below the new end may hold
        # other records from then on, so what was read from them is stale.
        self.generation = 0

    @property
    def files(self) -> MappedFileQueue:
        return self._files

    def load(self) -> None:
        self._files.load()
        self._last_file = self._files.last_file()

    def close(self) -> None:
        self._files.close()

    # -- offsets ---------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self._files.min_offset

    @property
    def max_offset(self) -> int:
        return self._files.max_offset

    @property
    def flushed_offset(self) -> int:
        return self._files.flushed_offset

    def flush(self) -> int:
        return self._files.flush()

    def set_queue_offsets(self, queue_offsets: dict[tuple[str, int], int]) -> None:
        with self._lock:
            self._queue_offsets = dict(queue_offsets)
            self._queue_reserved.clear()

    def queue_offsets(self) -> dict[tuple[str, int], int]:
        """A copy of the next queue offsets, as they stand now."""
        with self._lock:
            return dict(self._queue_offsets)

    def set_queue_count(self, topic: str, queue_count: int) -> None:
        assert 1 <= queue_count <= self._config.queue_count_max
        if self._queue_counts.get(topic) != queue_count:
            self._queue_counts[topic] = queue_count
            self._round_robin.pop(topic, None)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic: its next queue offsets and routing go (a new topic of the same
        name starts at queue offset 0)."""
        with self._lock:
            self._forget_topic_locked(topic)

    def _forget_topic_locked(self, topic: str) -> None:
        self._queue_offsets = {key: offset for key, offset in self._queue_offsets.items()
                               if key[0] != topic}
        self._queue_reserved = {key: offset for key, offset in self._queue_reserved.items()
                                if key[0] != topic}
        self._round_robin.pop(topic, None)
        self._queue_counts.pop(topic, None)

    def queue_count(self, topic: str) -> int:
        return self._queue_counts.get(topic, self._config.default_queue_count)

    # -- appends ---------------------------------------------------------------------------

    def append(self, message: Message, forget_topic: str | None = None) -> PutMessageResult:
        """One message: the hot path of every single put, kept free of per-call lists.
        `forget_topic` (a topic-delete record, store/system_topics.py): once the record is
        written, that topic's next queue offsets go in the same lock hold, so no put of the
        deleted incarnation lands after the record and every put of the next one starts at 0."""
        queue_id = self._choose_queue(message)
        if queue_id < 0:
            return self._bad_queue(message)
        encoded = encode_message(
            message, queue_id, time.time_ns() // 1_000_000, self._store_host,
            self._config.message_size_max_bytes,
        )
        if isinstance(encoded, tuple):
            return _refused(*encoded)
        result = PutMessageResult(PutMessageStatus.PUT_OK, queue_id, -1, -1, len(encoded),
                                  self._store_host)
        with self._lock:
            self._write_locked(message.topic, queue_id, encoded, result)
            if forget_topic is not None and result.status is PutMessageStatus.PUT_OK:
                self._forget_topic_locked(forget_topic)
        self._on_append()
        return result

    def append_batch(self, messages: Sequence[Message], *,
                     on_append: Callable[[], None] | None = None) -> list[PutMessageResult]:
        """Encode outside the lock, then write every valid record under one lock hold; then
        `on_append` (the log's own unless given)."""
        store_timestamp_ms = time.time_ns() // 1_000_000
        results: list[PutMessageResult] = []
        records: list[tuple[int, PutMessageResult, bytes, str]] = []
        for message in messages:
            result, encoded = self._encoded(message, store_timestamp_ms)
            results.append(result)
            if encoded is not None:
                records.append((result.queue_id, result, encoded, message.topic))
        if records:
            with self._lock:
                for queue_id, result, record, topic in records:
                    self._write_locked(topic, queue_id, record, result)
            (on_append or self._on_append)()
        return results

    def append_built(self, build: Callable[[dict[tuple[str, int], int]], Sequence[Message]]
                     ) -> list[PutMessageResult]:
        """Records built from the next queue offsets as they stand in the append's lock hold,
        then written in that hold (a metadata snapshot's queue starts: exact at its offset).
        Encoded in the hold too: for rare records only."""
        results: list[PutMessageResult] = []
        with self._lock:
            messages = build(dict(self._queue_offsets))
            store_timestamp_ms = time.time_ns() // 1_000_000
            for message in messages:
                result, encoded = self._encoded(message, store_timestamp_ms)
                if encoded is not None:
                    self._write_locked(message.topic, result.queue_id, encoded, result)
                results.append(result)
        self._on_append()
        return results

    def _encoded(self, message: Message, store_timestamp_ms: int
                 ) -> tuple[PutMessageResult, bytes | None]:
        """The message's record and its result to fill, or a refusal and None."""
        queue_id = self._choose_queue(message)
        if queue_id < 0:
            return self._bad_queue(message), None
        encoded = encode_message(message, queue_id, store_timestamp_ms, self._store_host,
                                 self._config.message_size_max_bytes)
        if isinstance(encoded, tuple):
            return _refused(*encoded), None
        return PutMessageResult(PutMessageStatus.PUT_OK, queue_id, -1, -1, len(encoded),
                                self._store_host), encoded

    def _bad_queue(self, message: Message) -> PutMessageResult:
        return _refused(
            PutMessageStatus.MESSAGE_ILLEGAL,
            f"queue_id {message.queue_id} is outside [0, {self.queue_count(message.topic)})",
        )

    def choose_queue(self, message: Message) -> int:
        """The queue a message goes to (its own, or the topic's next in turn); -1: invalid."""
        return self._choose_queue(message)

    def _choose_queue(self, message: Message) -> int:
        queue_id = message.queue_id
        if queue_id is not None:
            return queue_id if 0 <= queue_id < self.queue_count(message.topic) else -1
        cycle = self._round_robin.get(message.topic)
        if cycle is None:
            cycle = itertools.cycle(range(self.queue_count(message.topic)))
            cycle = self._round_robin.setdefault(message.topic, cycle)
        return next(cycle)

    def _write_locked(
        self, topic: str, queue_id: int, record: bytes, result: PutMessageResult
    ) -> None:
        size = len(record)
        mapped = self._last_file
        if mapped is None or size + END_FILE_MIN_BLANK_LENGTH > mapped.remaining_bytes:
            if size > self._record_size_max:
                result.status = PutMessageStatus.MESSAGE_ILLEGAL
                result.detail = f"record of {size} bytes does not fit a commit-log file"
                result.wrote_bytes = 0
                return
            if mapped is not None and not mapped.is_full:
                self._close_file_locked(mapped)
            mapped = self._last_file = self._writable_file_locked()
            if mapped is None:
                result.status = PutMessageStatus.CREATE_MAPPED_FILE_FAILED
                result.detail = f"cannot create a commit-log file: {self.create_file_error}"
                result.wrote_bytes = 0
                return
        key = (topic, queue_id)
        queue_offset = self._queue_offsets.get(key, 0)
        if queue_offset >= self._queue_reserved.get(key, 0) and self.reserve_queue is not None:
            try:
                reserved_below = self.reserve_queue(topic, queue_id, queue_offset)
                self._queue_reserved[key] = reserved_below
                if reserved_below <= queue_offset + 1:
                    self.single_entry_reservation_count += 1
            except OSError as error:
                result.status = PutMessageStatus.CREATE_MAPPED_FILE_FAILED
                result.detail = (f"cannot reserve consume-queue space for {topic}/{queue_id}: "
                                 f"{error}")
                result.wrote_bytes = 0
                return
        result.commit_log_offset = mapped.append_record(record, queue_offset)
        self._queue_offsets[key] = queue_offset + 1
        result.queue_offset = queue_offset

    def _writable_file_locked(self, start_if_empty: int = 0) -> MappedFile | None:
        """The file appends go to, or None when a new one cannot be created (a full disk):
        `create_file_error` says why until a creation works again. Logged once per spell."""
        try:
            mapped = self._files.writable_file(start_if_empty=start_if_empty)
        except OSError as error:
            if self.create_file_error is None:
                log.error("cannot create a commit-log file, appends are refused until one "
                          "can be: %s", error)
            self.create_file_error = str(error)
            return None
        if self.create_file_error is not None:
            log.info("commit-log files can be created again; appends resume")
            self.create_file_error = None
        return mapped

    @staticmethod
    def _close_file_locked(mapped: MappedFile) -> None:
        """Mark the rest of the file blank; readers and the slave skip to the next file."""
        remaining = mapped.remaining_bytes
        mapped.append(encode_blank(remaining))
        mapped.write_position = mapped.size_bytes

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> AppendRawStatus:
        """The slave's write: replicated bytes that must start exactly at our max offset."""
        with self._lock:
            # An empty slave takes the master's history from wherever it starts (a file
            # boundary: older files may be gone on the master); otherwise bytes must follow on.
            empty = self._files.last_file() is None
            if empty and offset % self._config.mapped_file_size_bytes == 0:
                pass
            elif offset != self.max_offset:
                return AppendRawStatus.OFFSET_MISMATCH
            mapped = self._writable_file_locked(start_if_empty=offset)
            if mapped is None:
                return AppendRawStatus.CREATE_MAPPED_FILE_FAILED
            if mapped.write_offset != offset:
                return AppendRawStatus.OFFSET_MISMATCH
            if len(data) > mapped.remaining_bytes:
                return AppendRawStatus.SPANS_FILES
            mapped.append(data)
            self._last_file = mapped
        self._on_append()
        return AppendRawStatus.OK

    def write_entry_record(self, position: int, record: bytes) -> AppendRawStatus:
        """DLedger's write, the same on every member: a whole record at `position`, which
        must be the log's end when the record fits the current file with room for the
        end-of-file blank, else the next file's start (the blank is written first); in an
        empty log, any file's start. Nothing is written on a mismatch."""
        if len(record) > self._record_size_max:
            return AppendRawStatus.SPANS_FILES
        with self._lock:
            status = self._write_entry_locked(position, record)
        if status is AppendRawStatus.OK:
            self._on_append()
        return status

    def _write_entry_locked(self, position: int, record: bytes) -> AppendRawStatus:
        size = len(record)
        last = self._files.last_file()
        if last is not None and self.create_file_error is None:
            # The common case, decided from the last file's write position alone (once per
            # entry on every member): the record fits with room for the blank, so it goes
            # at the file's end. A failed file creation takes the path below, which logs
            # its recovery.
            write_position = last.write_position
            if size + END_FILE_MIN_BLANK_LENGTH <= last.size_bytes - write_position:
                if position != last.start_offset + write_position:
                    return AppendRawStatus.OFFSET_MISMATCH
                last.append(record)
                self._last_file = last
                return AppendRawStatus.OK
        if last is None:
            expected = position - position % self._config.mapped_file_size_bytes
        elif not last.is_full and size + END_FILE_MIN_BLANK_LENGTH <= last.remaining_bytes:
            expected = last.write_offset
        else:
            expected = last.end_offset
        if position != expected:
            return AppendRawStatus.OFFSET_MISMATCH
        if last is not None and not last.is_full and position == last.end_offset:
            self._close_file_locked(last)
        mapped = self._writable_file_locked(start_if_empty=position)
        if mapped is None:
            return AppendRawStatus.CREATE_MAPPED_FILE_FAILED
        assert mapped.write_offset == position, (mapped.write_offset, position)
        mapped.append(record)
        self._last_file = mapped
        return AppendRawStatus.OK

    def delete_all(self) -> int:
        """Drop every file (a DLedger follower restarting from its leader's base)."""
        with self._lock:
            cleared_bytes = self._files.delete_all()
            self._last_file = None
            self.generation += 1  # after: no append can come before it (the lock)
            return cleared_bytes

    def truncate(self, offset: int) -> int:
        with self._lock:
            cut = offset < self._files.max_offset
            cleared_bytes = self._files.truncate(offset)
            self._last_file = self._files.last_file()
            if cut:
                self.generation += 1  # after: no append can come before it (the lock)
            return cleared_bytes

    # -- reads -----------------------------------------------------------------------------

    def _hold_file_for(self, offset: int) -> MappedFile:
        """The file holding `offset` below the write position, held: release it after use."""
        mapped = self._files.hold_file(offset)
        if mapped is not None and offset < mapped.write_offset:
            return mapped
        if mapped is not None:
            mapped.release()
        raise OffsetNotAvailableError(
            f"offset {offset} is outside [{self.min_offset}, {self.max_offset})"
        )

    def read_record(self, offset: int) -> StoredMessage:
        return self._decode_at(offset, decode_record)

    def read_records(self, offsets: Sequence[int]) -> list[StoredMessage | None]:
        """The records at `offsets` (ascending, as a queue's entries point), each file held
        and viewed once for the run of offsets it holds: a consume read of many records pays
        the file look-up once. None for a record no longer there (retention) or not whole,
        where `read_record` would raise."""
        return self._decode_many(offsets, decode_record)

    def read_heads_having(self, offsets: Sequence[int], marker: bytes) -> list[RecordHead]:
        """The heads of the records at `offsets` (ascending) whose encoded properties hold
        `marker` (store/record.py `decode_head_having`: the others' properties are not
        decoded), as `read_records` reads; records no longer there are left out."""
        heads = self._decode_many(
            offsets, lambda view, position: decode_head_having(view, position, marker))
        return [head for head in heads if head is not None]

    def _decode_many(self, offsets: Sequence[int],
                     decode: Callable[[memoryview, int], _Decoded | None]
                     ) -> list[_Decoded | None]:
        found: list[_Decoded | None] = []
        index = 0
        while index < len(offsets):
            try:
                mapped = self._hold_file_for(offsets[index])
            except OffsetNotAvailableError:
                found.append(None)
                index += 1
                continue
            try:
                start, end = mapped.start_offset, mapped.write_offset
                with mapped.view(0, mapped.write_position) as view:
                    while index < len(offsets) and start <= offsets[index] < end:
                        if self.read_seam is not None:
                            self.read_seam(mapped)
                        try:
                            found.append(decode(view, offsets[index] - start))
                        except RecordError:
                            # (the error, and the view its traceback holds, go here)
                            found.append(None)
                        index += 1
            finally:
                mapped.release()
        return found

    def read_head(self, offset: int) -> RecordHead:
        """The record at `offset` without its body (neither copied nor CRC-checked)."""
        return self._decode_at(offset, decode_head)

    def _decode_at(self, offset: int, decode: Callable[[memoryview], _Decoded]) -> _Decoded:
        mapped = self._hold_file_for(offset)
        try:
            position = offset - mapped.start_offset
            with mapped.view(position, mapped.write_position - position) as view:
                if self.read_seam is not None:
                    self.read_seam(mapped)
                return decode(view)
        except RecordError as error:
            # Raised again once released: its traceback keeps decode's view alive, and a
            # live view would keep the file's mapping from closing.
            failure = RecordError(f"offset {offset}: {error}")
        finally:
            mapped.release()
        raise failure

    def read_bytes(self, start: int, end: int) -> bytes:
        """Bytes [start, end) cut at the end of the file holding `start` and at max offset."""
        mapped = self._hold_file_for(start)
        try:
            position = start - mapped.start_offset
            size = min(end, mapped.write_offset) - start
            return mapped.read(position, size) if size > 0 else b""
        finally:
            mapped.release()

    def transfer_source(self, start: int, size_bytes_max: int) -> TransferSource | None:
        """Where [start, start + n) lies on disk for `os.sendfile`, never across two files;
        the source holds its file: the caller releases it (`with source:`)."""
        try:
            mapped = self._hold_file_for(start)
        except OffsetNotAvailableError:
            return None
        position = start - mapped.start_offset
        size = min(size_bytes_max, mapped.write_position - position)
        return TransferSource(mapped, position, start, size)


def _refused(status: PutMessageStatus, detail: str) -> PutMessageResult:
    return PutMessageResult(status, detail=detail)
