"""The key index: message keys -> commit-log offsets, in rolled files of bounded size.

Dispatch adds an entry per key of each record (hash of "topic#key", the record's offset and
store time), in commit-log order, to the newest file; a full file is flushed and a new one,
named by the offset of the record that opened it, takes over. Lookups walk the files newest
first and each file's chain for the key's slot: candidates only, the caller reads each record
and keeps those whose topic and keys really match (hash collisions are expected).

Recovery (`load`): every file is checked (index_file.py); the first that fails and all after
it are deleted, and `load` answers the offset from which the commit log must be indexed
again; entries of records past the recovered log end are dropped. Dispatch then skips records
the index already holds (offsets not above its last entry), so redispatch adds no duplicate.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

from store.files.disk import REAL_DISK, Disk
from store.index.index_file import IndexCorruptError, IndexFile
from store.paths import name_to_offset, offset_to_name

log = logging.getLogger(__name__)

# Links followed per lookup in each file: a key on very many messages, or a slot crowded by
# collisions, costs at most this much.
LOOKUP_STEPS_MAX = 100_000
LOOKUP_RESULTS_MAX = 1024


def hash_key(topic: str, key: str) -> int:
    return zlib.crc32(f"{topic}#{key}".encode())


class KeyIndex:
    def __init__(self, directory: Path, slot_count: int, entries_per_file: int,
                 disk: Disk = REAL_DISK,
                 hash_function: Callable[[str, str], int] = hash_key) -> None:
        self._directory = directory
        self._slot_count = slot_count
        self._entries_per_file = entries_per_file
        self._disk = disk
        self.hash_function = hash_function  # a seam: tests force collisions
        self._files: list[IndexFile] = []
        # Changes to the file list (roll, truncate, retention) against lookups walking it.
        self._lock = threading.Lock()

    # -- recovery --------------------------------------------------------------------------

    def load(self, commit_log_end: int) -> int | None:
        """Open and check the files; return where the commit log must be indexed from again
        (records at or past it may be missing from the index), None when the index has no
        file at all: no record with keys was ever indexed, and records stored before the
        index existed are not indexed after the fact."""
        self._directory.mkdir(parents=True, exist_ok=True)
        paths = sorted((offset, path) for path in self._directory.iterdir()
                       if (offset := name_to_offset(path.name)) is not None)
        for position, (begin_offset, path) in enumerate(paths):
            try:
                self._files.append(IndexFile.open(path, begin_offset, self._disk))
            except (IndexCorruptError, OSError, ValueError) as error:
                log.warning("key index: %s cannot be trusted (%s); rebuilding from offset %d",
                            path, error, begin_offset)
                for _, doomed in paths[position:]:
                    doomed.unlink(missing_ok=True)
                self._disk.fsync_directory(self._directory)
                return self._reindex_from(begin_offset, commit_log_end)
        return self._reindex_from(None, commit_log_end)

    def _reindex_from(self, deleted_begin: int | None, commit_log_end: int) -> int | None:
        self.truncate(commit_log_end)
        if not self._files:
            return deleted_begin
        covered = self._files[-1].covered_end_offset
        return covered if deleted_begin is None else min(covered, deleted_begin)

    # -- writes (dispatch's thread) ----------------------------------------------------------

    @property
    def last_offset(self) -> int:
        """The offset of the last record indexed (-1: none)."""
        for index_file in reversed(self._files):  # the newest may hold no entry yet
            if index_file.entry_count:
                return index_file.last_offset
        return -1

    def add(self, topic: str, keys: list[str], commit_log_offset: int,
            store_timestamp_ms: int) -> None:
        """Index a record's keys, one entry each (same offset); a record already indexed
        (redispatch) is skipped."""
        if commit_log_offset <= self.last_offset:
            return
        for key in dict.fromkeys(keys):
            current = self._writable(commit_log_offset)
            current.add(self.hash_function(topic, key), commit_log_offset, store_timestamp_ms)

    def _writable(self, commit_log_offset: int) -> IndexFile:
        current = self._files[-1] if self._files else None
        if current is not None and not current.is_full:
            return current
        with self._lock:
            if current is not None:
                current.flush(covered_end_offset=commit_log_offset)
            created = IndexFile.create(self._directory / offset_to_name(commit_log_offset),
                                       commit_log_offset, self._slot_count,
                                       self._entries_per_file, self._disk)
            self._disk.fsync_directory(self._directory)
            self._files.append(created)
            return created

    def flush(self, covered_end_offset: int) -> None:
        """Make the entries durable and record that every record below `covered_end_offset`
        is indexed (called by the checkpoint, with dispatch's position read before)."""
        if self._files:
            self._files[-1].flush(covered_end_offset)

    def truncate(self, end_offset: int) -> None:
        """Drop entries of records at or past `end_offset` (a cut log), files and all."""
        with self._lock:
            while self._files and self._files[-1].begin_offset >= end_offset:
                doomed = self._files.pop()
                doomed.close()
                doomed.path.unlink(missing_ok=True)
            if self._files and self._files[-1].last_offset >= end_offset:
                self._files[-1].truncate(end_offset)

    def delete_files_below(self, commit_log_min_offset: int) -> int:
        """Retention: remove files whose every record is gone from the log."""
        with self._lock:
            removable = 0
            for older, newer in zip(self._files, self._files[1:], strict=False):
                if newer.begin_offset <= commit_log_min_offset:
                    older.close()
                    older.path.unlink(missing_ok=True)
                    removable += 1
                else:
                    break
            del self._files[:removable]
            return removable

    # -- reads -----------------------------------------------------------------------------

    def candidates(self, topic: str, key: str, begin_timestamp_ms: int,
                   end_timestamp_ms: int, count_max: int) -> list[int]:
        """Offsets of records that may hold `key` in `topic`, stored in [begin, end), newest
        first, at most `count_max` of them (the caller checks each record)."""
        key_hash = self.hash_function(topic, key)
        found: list[int] = []
        with self._lock:
            for index_file in reversed(self._files):
                if index_file.entry_count == 0 \
                        or index_file.first_timestamp_ms >= end_timestamp_ms \
                        or index_file.last_timestamp_ms < begin_timestamp_ms:
                    continue
                for offset, stored_ms in index_file.chain(key_hash, LOOKUP_STEPS_MAX):
                    if begin_timestamp_ms <= stored_ms < end_timestamp_ms \
                            and (not found or found[-1] != offset):
                        found.append(offset)
                        if len(found) >= count_max:
                            return found
        return found

    @property
    def file_count(self) -> int:
        return len(self._files)

    def close(self) -> None:
        with self._lock:
            for index_file in self._files:
                index_file.close()
            self._files = []
