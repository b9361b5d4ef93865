"""Flush: makes the commit log durable, periodically (ASYNC_FLUSH) or as a group commit
(SYNC_FLUSH: one fsync serves every put waiting at that moment), and writes the checkpoint
after the consume queues are flushed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from store.checkpoint import Checkpoint, write_checkpoint
from store.commit_log import CommitLog
from store.completion import Pending
from store.config import StoreConfig
from store.consume_queue import ConsumeQueues
from store.deadlines import now_ms
from store.disk import REAL_DISK, Disk
from store.dispatch import DispatchService
from store.service import ServiceThread
from store.status import FlushDiskType, PutMessageStatus
from store.waits import OffsetWaits

_GROUP_COMMIT_IDLE_S = 0.01


class FlushService(ServiceThread):
    name = "flush"

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        queues: ConsumeQueues,
        dispatch: DispatchService,
        checkpoint_path: Path,
        disk: Disk = REAL_DISK,
    ) -> None:
        super().__init__()
        self._config = config
        self._commit_log = commit_log
        self._queues = queues
        self._dispatch = dispatch
        self._checkpoint_path = checkpoint_path
        self._disk = disk
        self._sync = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.waits = OffsetWaits(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        self._last_checkpoint_ms = 0
        # One checkpoint at a time: the thread's and a caller's (tests, shutdown) share a temp.
        self._checkpoint_lock = threading.Lock()
        self.fsync_count = 0

    def request(self, end_offset: int) -> Pending:
        """A SYNC_FLUSH put waits for the flush of everything up to `end_offset`."""
        future = self.waits.add(end_offset, now_ms() + self._config.sync_flush_timeout_ms)
        self.wake()
        return future

    def run_once(self) -> float:
        self.flush_commit_log()
        now = now_ms()
        if now - self._last_checkpoint_ms >= self._config.flush_consume_queue_interval_ms:
            self.checkpoint()
        if self._sync:
            return _GROUP_COMMIT_IDLE_S
        return self._config.flush_interval_ms / 1000

    def flush_commit_log(self) -> int:
        before = self._commit_log.flushed_offset
        flushed = self._commit_log.flush()
        if flushed != before:
            self.fsync_count += 1
        self.waits.advance(flushed)
        return flushed

    def checkpoint(self) -> Checkpoint:
        """Flush queues, then record a recovery start that both the log and queues cover."""
        with self._checkpoint_lock:
            recover_offset, last_record_offset = self._dispatch.position
            flushed = self.flush_commit_log()
            self._queues.flush()
            checkpoint = Checkpoint(recover_offset, last_record_offset, flushed,
                                    self._queues.count_with_entries(), int(time.time() * 1000))
            write_checkpoint(self._checkpoint_path, checkpoint, self._disk)
            self._last_checkpoint_ms = now_ms()
            return checkpoint
