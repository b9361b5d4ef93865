"""StoredDLedgerStorage: the DLedgerStorage of a broker in DLedger mode, over its store.

On disk, under the store's data directory: the commit log and consume queues as in every
mode, `dledger/index/` (store/index/entry_index.py), `dledger/hard_state` and `dledger/log_base`
(ha/dledger/stored/state_files.py). The store runs commit-limited: dispatch, reads and
`confirmed_offset` stop at the end of the committed entries, which after a restart is unknown
(nothing new is dispatched) until the leader's commit reaches `set_committed`.
"""

from __future__ import annotations

from ha.dledger.core.member import HardState
from ha.dledger.core.storage import DLedgerStorage
from ha.dledger.stored.log_recovery import LogRecoveryReport, recover_log
from ha.dledger.stored.state_files import read_hard_state, read_log_base, write_hard_state
from ha.dledger.stored.stored_log import StoredLog
from store.config import StoreConfig
from store.errors import StoreStateError
from store.files.disk import REAL_DISK, Disk
from store.index.entry_index import EntryIndex
from store.message_store import MessageStore
from store.paths import StorePaths

INDEX_ENTRIES_PER_FILE = 1 << 20  # 40 MiB index files: about a million entries each


class StoredDLedgerStorage:
    def __init__(self, config: StoreConfig, disk: Disk = REAL_DISK,
                 index_entries_per_file: int = INDEX_ENTRIES_PER_FILE,
                 store: MessageStore | None = None) -> None:
        """`store`: a commit-limited MessageStore built (not started) by the caller, so that a
        broker holds its store from construction; `open()` starts it. Default: built here."""
        assert store is None or store.commit_limit is not None, \
            "a DLedger store must be commit-limited"
        self._config = config
        self._disk = disk
        self._paths = StorePaths(config.data_dir)
        self._index_entries_per_file = index_entries_per_file
        self._given_store = store
        self._store: MessageStore | None = None
        self._index: EntryIndex | None = None
        self._log: StoredLog | None = None
        self.recovery: LogRecoveryReport | None = None

    @property
    def config(self) -> StoreConfig:
        return self._config

    @property
    def store(self) -> MessageStore:
        """The message store readers use (consume queues, get_messages, snapshots)."""
        if self._store is None:
            raise StoreStateError("the DLedger storage is not open")
        return self._store

    @property
    def log(self) -> StoredLog:
        if self._log is None:
            raise StoreStateError("the DLedger storage is not open")
        return self._log

    def open(self) -> tuple[HardState, StoredLog]:
        assert self._store is None, "open() twice"
        store = self._given_store or MessageStore(self._config, self._disk, commit_limited=True)
        store.start()
        try:
            self._paths.dledger_index_dir.mkdir(parents=True, exist_ok=True)
            self._disk.fsync_directory(self._paths.root)
            self._disk.fsync_directory(self._paths.dledger_index_dir.parent)
            hard_state = read_hard_state(self._paths.dledger_hard_state)
            base = read_log_base(self._paths.dledger_log_base)
            index = EntryIndex(self._paths.dledger_index_dir, self._index_entries_per_file,
                               self._disk)
            index.load()
            base, last, self.recovery = recover_log(store, index, base,
                                                    self._paths.dledger_log_base, self._disk)
            stored_log = StoredLog(store, index, base, last, self._paths.dledger_log_base,
                                   self._disk)
        except BaseException:
            store.halt()
            raise
        self._store, self._index, self._log = store, index, stored_log
        return hard_state, stored_log

    def persist_term_vote(self, term: int, voted_for: str | None) -> None:
        write_hard_state(self._paths.dledger_hard_state, HardState(term, voted_for), self._disk)

    def sync(self) -> None:
        """Records first, then the index: an indexed entry on disk always has its record."""
        self.store.commit_log.flush()
        assert self._index is not None
        self._index.flush()

    def start_appends(self) -> None:
        self.log.start_encoding()

    def set_committed(self, index: int) -> None:
        self.log.set_committed(index)

    def after_round(self) -> None:
        """Dispatch what the round committed, on the host thread (MessageStore's
        `dispatch_committed`)."""
        self.store.dispatch_committed()

    def close(self) -> None:
        """Sync, then stop the store cleanly (checkpoint written, abort marker removed)."""
        if self._store is None:
            return
        try:
            self.sync()
        finally:
            self._store.shutdown()
            assert self._index is not None
            self._index.close()
            self._store = self._index = self._log = None

    def halt(self) -> None:
        """Stop as a crash would (tests): nothing flushed."""
        if self._store is None:
            return
        self._store.halt()
        assert self._index is not None
        self._index.close()
        self._store = self._index = self._log = None


def _conforms(storage: StoredDLedgerStorage) -> DLedgerStorage:
    """mypy checks here that the class keeps the contract (ha/dledger/core/storage.py)."""
    return storage
