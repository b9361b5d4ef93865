"""A store's lifecycle: start (lock, recovery, services), clean shutdown and crash-stop
(halt), and the data dir's kept commit-log file size (part of store/message_store.py).
"""

from __future__ import annotations

import dataclasses
import enum
import fcntl
import logging
import os

from store.arrivals import Arrivals
from store.commit_log import CommitLog
from store.config import StoreConfig
from store.dispatch import DispatchService
from store.errors import ConfigError, StoreStateError
from store.files.allocate_service import AllocateService
from store.files.disk import Disk
from store.files.log_file_size import kept_file_size, record_file_size
from store.flush import FlushService
from store.health import StoreHealth
from store.index.consume_queue import ConsumeQueues
from store.index.key_index import KeyIndex
from store.paths import StorePaths
from store.recovery import RecoveryReport, recover
from store.replication_guard import ReplicationGuard
from store.retention import RetentionService
from store.service import ServiceThread
from store.status import PutMessageStatus
from store.timers.state import SavedStates, TimerState, save_state
from store.tombstones import Tombstones
from store.waits.deadlines import DeadlineService

log = logging.getLogger(__name__)


def _stop_logging_errors(service: ServiceThread) -> None:
    """Stop a service; its failure (dispatch's final drain, say) is logged, never allowed to
    skip the shutdown steps after it."""
    try:
        service.stop()
    except Exception:
        log.exception("shutdown: stopping %s failed; flushing and checkpointing anyway",
                      service.name)


class Lifecycle(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"


def keep_log_file_size(config: StoreConfig) -> StoreConfig:
    """`config` with the file size the data dir's commit log keeps, when it has files
    (store/files/log_file_size.py): a dir made with 1 GiB files still starts under a 64 MiB
    setting, and the reverse. A size the current settings cannot use (it must hold the
    largest record) is refused, naming the files."""
    directory = StorePaths(config.data_dir).commit_log_dir
    size = kept_file_size(config.data_dir, config.mapped_file_size_bytes)
    if size is None or size == config.mapped_file_size_bytes:
        return config
    try:
        kept = dataclasses.replace(config, mapped_file_size_bytes=size)
    except ConfigError as error:
        raise ConfigError(f"{directory} holds commit-log files of {size} bytes, the size the "
                          f"log was created with and keeps; it does not fit the settings: "
                          f"{error}") from error
    log.warning("%s holds commit-log files of %d bytes: the log keeps that size "
                "(mapped_file_size_bytes %d applies to a new data dir only)", directory, size,
                config.mapped_file_size_bytes)
    return kept


class StoreLifecycle:
    """Start, stop and crash-stop of a store, its lock and its timer-state saves (part of
    MessageStore)."""

    config: StoreConfig
    paths: StorePaths
    state: Lifecycle
    health: StoreHealth
    recovery: RecoveryReport | None
    commit_log: CommitLog
    queues: ConsumeQueues
    dispatch: DispatchService
    key_index: KeyIndex
    tombstones: Tombstones
    arrivals: Arrivals
    timer_state: TimerState
    timer_copies: SavedStates
    flush: FlushService
    retention: RetentionService
    deadlines: DeadlineService
    allocate: AllocateService
    _disk: Disk
    _lock_fd: int | None
    _timer_save_failing: bool
    _accepting_without_waits: bool
    _replication: ReplicationGuard | None
    _is_slave: bool
    _is_sync_master: bool
    _sync_flush: bool

    def start(self) -> RecoveryReport:
        if self.state is not Lifecycle.CREATED:
            raise StoreStateError(f"start() on a store that is {self.state.value}")
        self.paths.ensure()
        self._disk.fsync_directory(self.paths.root)  # the log directories' names, if new
        self._take_lock()
        crashed = self.paths.abort_marker.exists()
        self.tombstones.load()  # before redispatch, which skips deleted topics' records
        timer_covered_offset = self.timer_state.load(self.paths.timer_state)
        try:
            self.recovery = recover(self.paths, self.commit_log, self.queues, self.dispatch,
                                    crashed=crashed,
                                    check_crc=self.config.check_crc_on_recover,
                                    key_index=self.key_index, tombstones=self.tombstones,
                                    timer_state=self.timer_state,
                                    timer_covered_offset=timer_covered_offset)
        except BaseException:
            self._release_lock()
            self.commit_log.close()
            self.queues.close()
            self.key_index.close()
            raise
        self.paths.abort_marker.write_bytes(b"")
        record_file_size(self.config.data_dir, self.config.mapped_file_size_bytes, self._disk)
        self.flush.checkpoint()
        for service in self._services:
            service.start()
        self.state = Lifecycle.RUNNING
        self._update_fast_path()
        return self.recovery

    def shutdown(self) -> None:
        """Clean stop: everything flushed, checkpoint written, abort marker removed."""
        if self.state is not Lifecycle.RUNNING:
            raise StoreStateError(f"shutdown() on a store that is {self.state.value}")
        self.state = Lifecycle.STOPPED
        self._update_fast_path()
        self.arrivals.wake_all()
        try:
            for service in reversed(self._services):
                _stop_logging_errors(service)
            # Idle consume-queue files go first: the checkpoint needs descriptors of its own.
            self.queues.close_idle()
            # Whatever failed above, the log is flushed and the checkpoint written (it never
            # passes a queue dispatch could not write: DispatchService.position).
            checkpoint = self.flush.checkpoint()
            if checkpoint is not None and self.health.is_writable:
                self.paths.abort_marker.unlink(missing_ok=True)
            else:  # not everything reached the disk: the next start must run crash recovery
                log.warning("shutdown after a write fault: the abort marker stays")
        finally:
            self.flush.waits.fail_all(PutMessageStatus.FLUSH_DISK_TIMEOUT)
            self._close()

    def halt(self) -> None:
        """Stop as a crash would: no flush, no checkpoint, the abort marker stays (tests)."""
        if self.state is not Lifecycle.RUNNING:
            raise StoreStateError(f"halt() on a store that is {self.state.value}")
        self.state = Lifecycle.STOPPED
        self._update_fast_path()
        self.arrivals.wake_all()
        for service in reversed(self._services):
            if service is self.dispatch:
                self.dispatch.stop(drain=False)
            else:
                service.stop()
        self.flush.waits.fail_all(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        self._close()

    def save_timer_state(self) -> None:
        """Save the timer state with the dispatch offset it covers (at every checkpoint)."""
        covered: list[int] = []

        def encode(covered_offset: int) -> bytes:
            covered.append(covered_offset)
            return self.timer_state.encode(covered_offset)

        encoded = self.dispatch.at_position(encode)
        self.timer_copies.add(covered[0], encoded)
        self._write_timer_state(encoded)

    def _write_timer_state(self, encoded: bytes) -> None:
        """The timer state's file replaced by `encoded` (a failure is logged once a spell:
        the previous file stays)."""
        try:
            save_state(self.paths.timer_state, encoded, self._disk)
        except OSError as error:
            if not self._timer_save_failing:  # once per failing spell
                log.error("saving the timer state failed, the previous one stays: %s", error)
            self._timer_save_failing = True
        else:
            self._timer_save_failing = False

    @property
    def _services(self) -> tuple[ServiceThread, ...]:
        return (self.deadlines, self.allocate, self.dispatch, self.flush, self.retention)

    def _close(self) -> None:
        self.commit_log.close()
        self.queues.close()
        self.key_index.close()
        self._release_lock()

    def _take_lock(self) -> None:
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            os.close(fd)
            raise StoreStateError(
                f"{self.paths.root} is in use by another store (lock {self.paths.lock})"
            ) from error
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _update_fast_path(self) -> None:
        """Whether a put can skip the refusal checks: running, a master, and no put can wait
        (ASYNC_FLUSH, no SYNC_MASTER guard), so the bound on waiting puts cannot be reached."""
        self._accepting_without_waits = (
            self.state is Lifecycle.RUNNING
            and not self._is_slave
            and not self._sync_flush
            and (self._replication is None or not self._is_sync_master)
            and self.health.is_writable
        )
