"""Flush: makes the commit log durable, periodically (ASYNC_FLUSH) or as a group commit
(SYNC_FLUSH: one fsync serves every put waiting at that moment), and writes the checkpoint
after the consume queues are flushed. An msync/fsync error is never retried: see
store/health.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from store.checkpoint import Checkpoint, write_checkpoint
from store.clock import monotonic_ms
from store.commit_log import CommitLog
from store.config import StoreConfig
from store.dispatch import DispatchService
from store.files.disk import REAL_DISK, Disk
from store.health import StoreHealth
from store.index.consume_queue import ConsumeQueues
from store.index.key_index import KeyIndex
from store.service import ServiceThread
from store.status import FlushDiskType, PutMessageStatus
from store.waits.completion import Pending
from store.waits.offset_waits import OffsetWaits

log = logging.getLogger(__name__)

_GROUP_COMMIT_IDLE_S = 0.01


# What a put waiting for a flush gets when an msync/fsync fails. Not FLUSH_DISK_TIMEOUT: that
# is a 202 saying "stored, the flush just did not finish by the deadline", and a producer
# rightly does not resend it. After a write-back error the kernel may drop the failed pages,
# so the store cannot say the message is kept: UNKNOWN_ERROR (500, `is_stored` false) tells the
# producer it was not stored by this broker and to resend (elsewhere: this broker now refuses
# writes with SERVICE_NOT_AVAILABLE). A resend may duplicate it, as any at-least-once retry.
FLUSH_FAILED_STATUS = PutMessageStatus.UNKNOWN_ERROR


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
        health: StoreHealth | None = None,
        key_index: KeyIndex | None = None,
        save_derived: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self._config = config
        self._commit_log = commit_log
        self._queues = queues
        self._key_index = key_index
        # State derived by dispatch that saves itself with the offset it covers (the timer
        # state): saved at every checkpoint; it reports its own failures (the previous file
        # stays, and recovery starts from where that one stops).
        self._save_derived = save_derived
        self._dispatch = dispatch
        self._checkpoint_path = checkpoint_path
        self._disk = disk
        self._health = health if health is not None else StoreHealth()
        self._sync = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.waits = OffsetWaits(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        self._last_checkpoint_ms = 0
        # One checkpoint at a time: the thread's and a caller's (tests, shutdown) share a temp.
        self._checkpoint_lock = threading.Lock()
        self.fsync_count = 0
        self.checkpoint_failure_count = 0
        self.checkpoint_error: str | None = None

    def request(self, end_offset: int) -> Pending:
        """A SYNC_FLUSH put waits for the flush of everything up to `end_offset`."""
        future = self.waits.add(end_offset, monotonic_ms() + self._config.sync_flush_timeout_ms)
        if not self._health.is_writable:  # a fault recorded since the put was let in
            self.waits.fail_all(FLUSH_FAILED_STATUS)
        self.wake()
        return future

    def run_once(self) -> float:
        self.flush_commit_log()
        now = monotonic_ms()
        if now - self._last_checkpoint_ms >= self._config.flush_consume_queue_interval_ms:
            self.checkpoint()
        if self._sync:
            return _GROUP_COMMIT_IDLE_S
        return self._config.flush_interval_ms / 1000

    def flush_commit_log(self) -> int:
        """Flush the log and complete the waits it covers. After a fault it flushes nothing
        ever again: a retry would succeed on pages whose write-back already failed."""
        before = self._commit_log.flushed_offset
        if not self._health.is_writable:
            return before
        try:
            flushed = self._commit_log.flush()
        except OSError as error:
            self._fail("commit-log msync", error)
            return before
        if flushed != before:
            self.fsync_count += 1
        self.waits.advance(flushed)
        return flushed

    def checkpoint(self) -> Checkpoint | None:
        """Flush queues, then record a recovery start that both the log and queues cover.

        None when no checkpoint was written: the store faulted (a checkpoint would claim
        flushed what may not be), or writing the file failed (the previous checkpoint stays
        whole and still valid: recovery scans from an older start; retried next interval).
        """
        with self._checkpoint_lock:
            self._last_checkpoint_ms = monotonic_ms()
            recover_offset, last_record_offset = self._dispatch.position
            flushed = self.flush_commit_log()
            if not self._health.is_writable:
                return None
            try:
                self._queues.flush()
            except OSError as error:
                self._fail("consume-queue msync", error)
                return None
            if self._key_index is not None:
                try:  # every record below the recover offset is in the index: it says so
                    self._key_index.flush(recover_offset)
                except OSError as error:
                    self._fail("key-index msync", error)
                    return None
                self._key_index.delete_files_below(self._commit_log.min_offset)
            checkpoint = Checkpoint(recover_offset, last_record_offset, flushed,
                                    self._queues.count_with_entries(), int(time.time() * 1000))
            written = self._write_checkpoint(checkpoint)
            self._save_derived_state()  # any order: recovery starts from the lower offset
            return written

    def _save_derived_state(self) -> None:
        if self._save_derived is not None:
            self._save_derived()

    def _write_checkpoint(self, checkpoint: Checkpoint) -> Checkpoint | None:
        try:
            write_checkpoint(self._checkpoint_path, checkpoint, self._disk)
        except OSError as error:
            self.checkpoint_failure_count += 1
            if self.checkpoint_error is None:  # one line per failing spell, not per retry
                log.error("writing the checkpoint failed, the previous one stays: %s", error)
            self.checkpoint_error = f"{type(error).__name__}: {error}"
            return None
        if self.checkpoint_error is not None:
            log.info("checkpoint written again after %d failures", self.checkpoint_failure_count)
            self.checkpoint_error = None
        return checkpoint

    def _fail(self, operation: str, error: OSError) -> None:
        self._health.record_fault(operation, error)
        self.waits.fail_all(FLUSH_FAILED_STATUS)
