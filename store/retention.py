"""Retention: whole commit-log files go when older than the reserved time or when the disk is
fuller than allowed; consume-queue files whose entries all point below the log go with them.
The file being written, and anything dispatch has not read yet, is never removed. Nor is a
file at or past the metadata floor (the last whole metadata snapshot, store/system_feed.py):
when retention reaches it, `on_metadata_floor` (a classic master's snapshot writer) writes a
new snapshot at the log's end, and the file goes once that one is dispatched."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from store.commit_log import CommitLog
from store.config import StoreConfig
from store.dispatch import DispatchService
from store.index.consume_queue import ConsumeQueues
from store.service import ServiceThread

log = logging.getLogger(__name__)


def disk_used_ratio(path: Path) -> float:
    stats = os.statvfs(path)
    total = stats.f_blocks * stats.f_frsize
    free = stats.f_bavail * stats.f_frsize
    return 1.0 - free / total if total else 0.0


class RetentionService(ServiceThread):
    name = "retention"

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        queues: ConsumeQueues,
        dispatch: DispatchService,
        used_ratio: Callable[[Path], float] = disk_used_ratio,
        wall_clock_s: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self._config = config
        self._commit_log = commit_log
        self._queues = queues
        self._dispatch = dispatch
        self._used_ratio = used_ratio
        self._wall_clock_s = wall_clock_s
        self.removed_file_count = 0
        # DLedger mode: files ending past this offset hold records a lagging peer still needs
        # (the host sets it from the peers' match); None: no hold. When the hold keeps a file
        # retention wanted to remove, `blocked_offset` is its start (the admin view shows it).
        self.hold_offset: int | None = None
        self.blocked_offset: int | None = None
        # Classic modes: the lowest offset the metadata tables need to be rebuilt from the
        # log (None: nothing), and what writes a newer snapshot when retention reaches it
        # (True once one is written and dispatched). Set by the broker.
        self.metadata_floor: Callable[[], int | None] | None = None
        self.on_metadata_floor: Callable[[], bool] | None = None
        self.metadata_blocked_offset: int | None = None

    def _past_metadata_floor(self, end_offset: int) -> bool:
        """Whether a file ending at `end_offset` holds nothing the metadata floor keeps; when
        it does, a newer snapshot is asked for (once a round) and the floor read again."""
        if self.metadata_floor is None:
            return True
        floor = self.metadata_floor()
        if floor is None or floor >= end_offset:
            return True
        if self.on_metadata_floor is None or not self.on_metadata_floor():
            log.debug("retention: keeping the file ending at %d, it holds the last metadata "
                     "snapshot (a slave waits for its master's next)", end_offset)
            return False
        floor = self.metadata_floor()
        return floor is None or floor >= end_offset

    def run_once(self) -> float:
        self.delete_expired()
        return self._config.retention_interval_ms / 1000

    def delete_expired(self) -> int:
        """Remove what retention allows now; return how many commit-log files went."""
        reserved_s = self._config.file_reserved_hours * 3600
        now_s = self._wall_clock_s()
        files = self._commit_log.files.files
        count = 0
        blocked_before, self.blocked_offset = self.blocked_offset, None
        self.metadata_blocked_offset = None
        for mapped in files[:-1]:  # never the file being written
            if mapped.end_offset > self._dispatch.position[0]:
                break  # its records have no consume-queue entries yet (or a failed queue's)
            too_old = now_s - mapped.path.stat().st_mtime > reserved_s
            too_full = self._used_ratio(self._config.data_dir) > self._config.disk_max_used_ratio
            if not (too_old or too_full):
                break
            hold = self.hold_offset
            if hold is not None and mapped.end_offset > hold:
                if blocked_before != mapped.start_offset:
                    log.warning("retention: keeping %s, a lagging peer still needs it",
                                mapped.path.name)
                self.blocked_offset = mapped.start_offset
                break
            if not self._past_metadata_floor(mapped.end_offset):
                self.metadata_blocked_offset = mapped.start_offset
                break
            log.info("retention: removing %s (too old: %s, disk too full: %s)",
                     mapped.path.name, too_old, too_full)
            count += 1
            # Remove one at a time so the disk ratio is re-read after each removal.
            with self._dispatch.changes.changing():
                self._commit_log.files.delete_first(1)
        if count:
            self.removed_file_count += count
            min_offset = self._commit_log.min_offset
            with self._dispatch.changes.changing():
                for queue in self._queues.all():
                    queue.delete_files_below(min_offset)
        return count
