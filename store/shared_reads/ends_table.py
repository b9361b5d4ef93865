"""The readable ends of a store's queues, in a file both processes map (docs/read-workers.md).

The process that appends (the writer) publishes, per queue, whether it may be read and its
[min, max) queue offsets: max only after dispatch wrote the entries below it, so an entry a
reader finds below max is whole. The header holds the log's first offset and the change
sequence: odd while the writer changes the store other than by appending (retention, a
truncation, a topic delete or change), bumped again when done. A reader notes the sequence
before a read and checks it after: when it moved, the read is thrown away.

A slot is written under its own sequence number (odd while written), and read again by a
reader that saw it move: never half-written. Slots are never reused: a queue keeps its slot
for the life of the file (a deleted topic's slots say "not readable"). At most SLOTS_MAX
queues are published; a queue past it is not, and readers leave it to the writer.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import NamedTuple

MAGIC = b"twlends1"
# magic, change sequence, the log's first offset, slots used
_HEADER = struct.Struct("<8sQQI4x")
# sequence, queue id, readable, topic length, topic, min, max
_SLOT = struct.Struct("<QIBB2x128sQQ")
_SEQUENCE = struct.Struct("<Q")
SLOTS_MAX = 16_384
SIZE_BYTES = _HEADER.size + SLOTS_MAX * _SLOT.size
_CHANGE_AT = 8
_LOG_MIN_AT = 16
_USED_AT = 24
# A reader's tries at a slot or header being written before it gives up (the writer holds
# one for a few microseconds).
_READ_TRIES_MAX = 100


class QueueEnds(NamedTuple):
    readable: bool
    min_queue_offset: int
    max_queue_offset: int


class EndsWriter:
    """The writer's side: one thread at a time (callers hold their own lock or thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        temp = path.with_suffix(".tmp")
        with open(temp, "wb") as file:
            file.truncate(SIZE_BYTES)
        os.replace(temp, path)  # a reader never maps a file shorter than the table
        self._fd = os.open(path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, SIZE_BYTES)
        _HEADER.pack_into(self._map, 0, MAGIC, 0, 0, 0)
        self._slots: dict[tuple[str, int], int] = {}

    def publish(self, topic: str, queue_id: int, ends: QueueEnds) -> bool:
        """Write a queue's slot (taking one for a queue new to the table); False when the
        table is full (the queue stays unpublished: readers leave it to the writer)."""
        slot = self._slots.get((topic, queue_id))
        if slot is None:
            slot = len(self._slots)
            if slot >= SLOTS_MAX:
                return False
            self._slots[(topic, queue_id)] = slot
            self._write_slot(slot, topic, queue_id, ends)
            struct.pack_into("<I", self._map, _USED_AT, slot + 1)
            return True
        self._write_slot(slot, topic, queue_id, ends)
        return True

    def published(self) -> list[tuple[str, int]]:
        return list(self._slots)

    def _write_slot(self, slot: int, topic: str, queue_id: int, ends: QueueEnds) -> None:
        at = _HEADER.size + slot * _SLOT.size
        sequence: int = _SEQUENCE.unpack_from(self._map, at)[0]
        _SEQUENCE.pack_into(self._map, at, sequence + 1)  # odd: being written
        name = topic.encode("utf-8")
        _SLOT.pack_into(self._map, at, sequence + 1, queue_id, ends.readable, len(name), name,
                        ends.min_queue_offset, ends.max_queue_offset)
        _SEQUENCE.pack_into(self._map, at, sequence + 2)

    def begin_change(self) -> None:
        """The store changes other than by appending: readers' reads from now on until
        `end_change` are thrown away."""
        sequence = self._change_sequence()
        if sequence % 2 == 0:
            _SEQUENCE.pack_into(self._map, _CHANGE_AT, sequence + 1)

    def end_change(self, log_min_offset: int) -> None:
        _SEQUENCE.pack_into(self._map, _LOG_MIN_AT, log_min_offset)
        sequence = self._change_sequence()
        _SEQUENCE.pack_into(self._map, _CHANGE_AT, sequence + (1 if sequence % 2 else 2))

    def _change_sequence(self) -> int:
        sequence: int = _SEQUENCE.unpack_from(self._map, _CHANGE_AT)[0]
        return sequence

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


class EndsReader:
    """A reader's side: looks queues up by name, reads their slots whole."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._map = mmap.mmap(fd, SIZE_BYTES, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        if self._map[:8] != MAGIC:
            self._map.close()
            raise ValueError(f"{path} is not a table of readable ends")
        self._slots: dict[tuple[str, int], int] = {}
        self._seen = 0  # slots looked at

    def change_sequence(self) -> int:
        """The change sequence (odd: a change is under way)."""
        sequence: int = _SEQUENCE.unpack_from(self._map, _CHANGE_AT)[0]
        return sequence

    def log_min_offset(self) -> int:
        offset: int = _SEQUENCE.unpack_from(self._map, _LOG_MIN_AT)[0]
        return offset

    def ends(self, topic: str, queue_id: int) -> QueueEnds | None:
        """A queue's published ends; None when it is not published (or its slot did not
        stand still for a read)."""
        slot = self._slots.get((topic, queue_id))
        if slot is None:
            self._look_at_new_slots()
            slot = self._slots.get((topic, queue_id))
            if slot is None:
                return None
        at = _HEADER.size + slot * _SLOT.size
        for _ in range(_READ_TRIES_MAX):
            sequence, _, readable, _, _, low, high = _SLOT.unpack_from(self._map, at)
            if sequence % 2 == 0 and _SEQUENCE.unpack_from(self._map, at)[0] == sequence:
                return QueueEnds(bool(readable), low, high)
        return None

    def _look_at_new_slots(self) -> None:
        used = min(struct.unpack_from("<I", self._map, _USED_AT)[0], SLOTS_MAX)
        for slot in range(self._seen, used):
            at = _HEADER.size + slot * _SLOT.size
            _, queue_id, _, length, name, _, _ = _SLOT.unpack_from(self._map, at)
            self._slots[(name[:length].decode("utf-8"), queue_id)] = slot
        self._seen = used

    def close(self) -> None:
        self._map.close()
