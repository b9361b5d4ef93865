"""The DLedger entry index: one fixed-size entry per log index, beside the commit log.

Entry `i` lives at byte offset `i * ENTRY_SIZE_BYTES` of a log of mapped files (the same
`MappedFileQueue` as the commit log and the consume queues, so it rolls, syncs and reports to
the durability seam the same way). Each entry (big-endian, 40 bytes):

    magic u32 | size i32 | index i64 | term i64 | position i64 | payload crc u32 | entry crc u32

`position` is the commit-log offset of the entry's record (for the leader's empty no-op: the
end of the entry before it, -1 when unknown after a reset), `size` its length in bytes (0 for
a no-op), `payload crc` the CRC-32 of the whole record (so recovery can tell a record from
another of the same size written at the same position after a truncation), `entry crc` the
CRC-32 of the 36 bytes before it. A zeroed or torn entry fails its magic or its CRC.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from store.files.disk import REAL_DISK, Disk
from store.files.mapped_file_queue import MappedFileQueue

INDEX_MAGIC = 0x444C4958  # "DLIX"
_BODY = struct.Struct(">Iiqqq I")
_CRC = struct.Struct(">I")
ENTRY_SIZE_BYTES = _BODY.size + _CRC.size
assert ENTRY_SIZE_BYTES == 40


@dataclass(frozen=True, slots=True)
class IndexEntry:
    index: int
    term: int
    position: int
    size_bytes: int
    payload_crc: int

    @property
    def end_position(self) -> int:
        """Where the next record may start (-1: unknown, a no-op after a reset)."""
        return self.position + self.size_bytes if self.position >= 0 else -1

    def encode(self) -> bytes:
        return encode_entry(self.index, self.term, self.position, self.size_bytes,
                            self.payload_crc)


def encode_entry(index: int, term: int, position: int, size_bytes: int,
                 data_crc: int) -> bytes:
    """An entry's 40 bytes (the hot path builds them without an IndexEntry)."""
    body = _BODY.pack(INDEX_MAGIC, size_bytes, index, term, position, data_crc)
    return body + _CRC.pack(zlib.crc32(body))


def payload_crc(payload: bytes | memoryview) -> int:
    return zlib.crc32(payload)


def decode_entry(raw: bytes | memoryview) -> IndexEntry | None:
    """The entry in `raw`, or None when it is zeroed, torn or foreign."""
    if len(raw) < ENTRY_SIZE_BYTES:
        return None
    (crc,) = _CRC.unpack_from(raw, _BODY.size)
    if zlib.crc32(raw[: _BODY.size]) != crc:
        return None
    magic, size, index, term, position, data_crc = _BODY.unpack_from(raw, 0)
    if magic != INDEX_MAGIC or size < 0 or index < 1 or term < 0:
        return None
    return IndexEntry(index, term, position, size, data_crc)


class EntryIndex:
    """Entries `first..last` (contiguous) of the index file log; the caller owns the base."""

    def __init__(self, directory: Path, entries_per_file: int, disk: Disk = REAL_DISK) -> None:
        assert entries_per_file >= 1
        self._files = MappedFileQueue(directory, entries_per_file * ENTRY_SIZE_BYTES, disk,
                                      random_access=True)

    @property
    def files(self) -> MappedFileQueue:
        return self._files

    def load(self) -> None:
        """Map the files (recovery then finds the valid entries with `read` and cuts the
        rest with `truncate_after`)."""
        self._files.load()

    def close(self) -> None:
        self._files.close()

    def read(self, index: int) -> IndexEntry | None:
        """The entry written for `index`, or None when none valid is there."""
        offset = index * ENTRY_SIZE_BYTES
        mapped = self._files.hold_file(offset)
        if mapped is None:
            return None
        try:
            position = offset - mapped.start_offset
            if position + ENTRY_SIZE_BYTES > mapped.write_position:
                return None
            entry = decode_entry(mapped.read(position, ENTRY_SIZE_BYTES))
        finally:
            mapped.release()
        return entry if entry is not None and entry.index == index else None

    def append(self, entry: IndexEntry) -> None:
        """Write `entry` at its slot: right after the last one, or anywhere in an empty index
        (after a reset). Raises OSError when a new file cannot be created."""
        offset = entry.index * ENTRY_SIZE_BYTES
        files = self._files
        last = files.last_file()
        if last is not None and not last.is_full:
            # The common case (once per entry): the slot after the last, in the last file.
            assert offset == last.start_offset + last.write_position, (entry.index,
                                                                        last.write_offset)
            last.append(entry.encode())
            return
        empty = last is None
        if not empty:
            assert offset == files.max_offset, (entry.index, files.max_offset)
        start_if_empty = offset - offset % files.file_size_bytes
        mapped = files.writable_file(start_if_empty=start_if_empty)
        if empty:
            mapped.write_position = offset - mapped.start_offset
        mapped.append(entry.encode())

    def room(self) -> int:
        """How many entries the last file still takes (0 when there is no file)."""
        last = self._files.last_file()
        return 0 if last is None else last.remaining_bytes // ENTRY_SIZE_BYTES

    def append_encoded(self, first_index: int, encoded: bytes) -> None:
        """Encoded entries from `first_index` on, right after the last one and within
        `room()` (so no file is created and nothing can fail): one write."""
        last = self._files.last_file()
        assert last is not None and len(encoded) <= last.remaining_bytes, (first_index,
                                                                           len(encoded))
        assert first_index * ENTRY_SIZE_BYTES == last.write_offset, (first_index,
                                                                     last.write_offset)
        assert len(encoded) % ENTRY_SIZE_BYTES == 0, len(encoded)
        last.append(encoded)

    def truncate_from(self, index: int) -> None:
        """Remove the entries from `index` on (zeroed, later files deleted)."""
        self._files.truncate(index * ENTRY_SIZE_BYTES)

    def delete_all(self) -> None:
        self._files.delete_all()

    def delete_files_below(self, index: int) -> None:
        """Retention: remove the files that hold only entries below `index`."""
        files = self._files
        count = 0
        for mapped in files.files[:-1]:
            if mapped.end_offset > index * ENTRY_SIZE_BYTES:
                break
            count += 1
        if count:
            files.delete_first(count)

    def flush(self) -> None:
        self._files.flush()
