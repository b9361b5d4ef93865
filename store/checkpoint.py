"""The checkpoint: where recovery may start, with its own CRC, written atomically.

`recover_offset` is a record boundary at or below both the flushed commit log and the flushed
consume queues: every record before it is durable and has its consume-queue entry on disk.
`last_record_offset` (the record ending there) and `queue_count` let recovery check that the
files still keep that promise; when they do not (a file cut or removed by hand, a disk that
lied) recovery scans and redispatches the whole log instead of trusting it.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from store.files import durability
from store.files.disk import REAL_DISK, Disk
from store.paths import TEMP_SUFFIX

log = logging.getLogger(__name__)

_MAGIC = 0x54574C43  # "TWLC"
_VERSION = 1
# magic, version, recover offset, last record offset, flushed offset, queue count, time ms
_LAYOUT = struct.Struct(">IIqqqqq")
_CRC = struct.Struct(">I")
CHECKPOINT_SIZE_BYTES = _LAYOUT.size + _CRC.size


@dataclass(frozen=True, slots=True)
class Checkpoint:
    recover_offset: int
    last_record_offset: int
    commit_log_flushed_offset: int
    queue_count: int
    written_timestamp_ms: int

    def encode(self) -> bytes:
        body = _LAYOUT.pack(
            _MAGIC, _VERSION, self.recover_offset, self.last_record_offset,
            self.commit_log_flushed_offset, self.queue_count, self.written_timestamp_ms,
        )
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def decode(cls, raw: bytes) -> Checkpoint | None:
        """The checkpoint in `raw`, or None when it is short, foreign or fails its CRC."""
        if len(raw) != CHECKPOINT_SIZE_BYTES:
            return None
        body, (crc,) = raw[: _LAYOUT.size], _CRC.unpack_from(raw, _LAYOUT.size)
        if zlib.crc32(body) != crc:
            return None
        magic, version, recover_offset, last_record, flushed, queues, written_ms = (
            _LAYOUT.unpack(body))
        if magic != _MAGIC or version != _VERSION or recover_offset < 0:
            return None
        return cls(recover_offset, last_record, flushed, queues, written_ms)


def read_checkpoint(path: Path) -> Checkpoint | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    checkpoint = Checkpoint.decode(raw)
    if checkpoint is None:
        log.warning("%s is damaged (size, magic or CRC); recovery scans the whole log", path)
    return checkpoint


def write_checkpoint(path: Path, checkpoint: Checkpoint, disk: Disk = REAL_DISK) -> None:
    """Write a temp file, fsync it, rename it over the old one, fsync the directory."""
    write_file_atomically(path, checkpoint.encode(), disk)


def write_file_atomically(path: Path, data: bytes, disk: Disk = REAL_DISK) -> None:
    """On any failure the old file stays whole and the temp file is removed: a retry starts
    from fresh pages, never from pages whose write-back already failed once."""
    temp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"short write to {temp}: {written} of {len(data)}")
            disk.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    disk.fsync_directory(path.parent)
    for listener in durability.listeners:
        listener.replaced(path, data)
