"""Where a consume queue's 20-byte entries lie in its log of files (store/index/consume_queue.py):
entry `i` at byte `i * 20`; the file an entry is written into, entries read in one pass, and
where a file's written entries end after a power loss."""

from __future__ import annotations

import struct

from store.config import CONSUME_QUEUE_ENTRY_SIZE_BYTES
from store.files.mapped_file import MappedFile
from store.files.mapped_file_queue import MappedFileQueue

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = CONSUME_QUEUE_ENTRY_SIZE_BYTES
assert ENTRY.size == ENTRY_SIZE
_ZERO_ENTRY = bytes(ENTRY_SIZE)


def file_for(files: MappedFileQueue, queue_offset: int) -> MappedFile:
    """The file to write entry `queue_offset` into (the last one, or a new one), with the
    entry's blocks reserved (OSError, ENOSPC..., when they cannot be)."""
    byte_offset = queue_offset * ENTRY_SIZE
    mapped = files.writable_file(start_if_empty=byte_offset - byte_offset % files.file_size_bytes)
    if mapped.start_offset <= byte_offset < mapped.end_offset:
        files.reserve(mapped, byte_offset - mapped.start_offset + ENTRY_SIZE)
    return mapped


def entries_in(files: MappedFileQueue, start: int,
                count: int) -> list[tuple[int, int, int] | None]:
    """ConsumeQueue.entries' read, under the queue's lock."""
    found: list[tuple[int, int, int] | None] = []
    end = min(start + count, files.max_offset // ENTRY_SIZE)
    offset = start
    while offset < end:
        mapped = files.hold_file(offset * ENTRY_SIZE)
        if mapped is None:  # removed by retention meanwhile
            found.append(None)
            offset += 1
            continue
        try:
            last = min(end, mapped.end_offset // ENTRY_SIZE)
            position = offset * ENTRY_SIZE - mapped.start_offset
            raw = mapped.read(position, (last - offset) * ENTRY_SIZE)
        finally:
            mapped.release()
        found += [entry if entry[0] >= 0 and entry[1] > 0 else None
                  for entry in ENTRY.iter_unpack(raw)]
        offset = last
    return found


def raw_entry(files: MappedFileQueue, queue_offset: int) -> tuple[int, int, int]:
    mapped = files.find_file(queue_offset * ENTRY_SIZE)
    assert mapped is not None
    entry: tuple[int, int, int] = ENTRY.unpack_from(
        mapped.view(queue_offset * ENTRY_SIZE - mapped.start_offset, ENTRY_SIZE)
    )
    return entry


def written_end(last: MappedFile) -> int:
    """Where the last file's written entries end: one past the last entry that is not all
    zeros. A binary search for the first zero entry finds it when the written entries form a
    prefix; after a power loss a hole (unwritten pages) may sit below written entries, so the
    data the file system holds past that point is searched as well."""
    low, high = 0, last.size_bytes // ENTRY_SIZE
    while low < high:
        middle = (low + high) // 2
        if last.view(middle * ENTRY_SIZE, ENTRY_SIZE) == _ZERO_ENTRY:
            high = middle
        else:
            low = middle + 1
    end = low * ENTRY_SIZE
    for start, stop in reversed(last.data_regions(end, last.size_bytes)):
        written = len(last.read(start, stop - start).rstrip(b"\x00"))
        if written:
            return max(end, round_up(start + written, ENTRY_SIZE))
    return end


def round_up(value: int, unit: int) -> int:
    return (value + unit - 1) // unit * unit
