"""An in-memory DLedgerStorage: what the host tests and the bench run on.

It keeps the storage contract's durability line: changes made through the NodeLog are
journaled and reach the durable copy only at `sync()`, so `crash()` (losing what was not
synced) followed by `open()` recovers exactly what a disk would have kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.member import HardState
from ha.dledger.core.messages import Entry

_Change = Callable[[EntryLog], None]


class JournaledLog(EntryLog):
    """An EntryLog that records each change for the durable copy to replay at sync."""

    def __init__(self, durable: EntryLog) -> None:
        self.journal: list[_Change] = []
        super().__init__(durable.base_index, durable.base_term, durable.entries())
        self.journal.clear()  # the copied entries are durable already

    def append(self, entry: Entry) -> None:
        super().append(entry)
        self.journal.append(lambda log: log.append(entry))

    def truncate_from(self, index: int) -> None:
        super().truncate_from(index)
        self.journal.append(lambda log: log.truncate_from(index))

    def reset(self, base_index: int, base_term: int) -> None:
        super().reset(base_index, base_term)
        self.journal.append(lambda log: log.reset(base_index, base_term))

    def compact_to(self, index: int) -> None:
        super().compact_to(index)
        self.journal.append(lambda log: log.compact_to(index))


class MemoryStorage:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # tests read the durable state from their own thread
        self._hard_state = HardState()
        self._durable = EntryLog()
        self._live: JournaledLog | None = None
        self.committed_index = 0
        self.sync_count = 0

    def open(self) -> tuple[HardState, JournaledLog]:
        with self._lock:
            self._live = JournaledLog(self._durable)
            return self._hard_state, self._live

    def persist_term_vote(self, term: int, voted_for: str | None) -> None:
        with self._lock:
            self._hard_state = HardState(term, voted_for)

    def sync(self) -> None:
        assert self._live is not None, "sync before open"
        with self._lock:
            for change in self._live.journal:
                change(self._durable)
            self._live.journal.clear()
            self.sync_count += 1

    def start_appends(self) -> None:
        """Payloads here do not depend on where they lie: nothing to prepare."""

    def set_committed(self, index: int) -> None:
        # A restarted node counts its commit up again from its base: keep the highest.
        with self._lock:
            self.committed_index = max(self.committed_index, index)

    def after_round(self) -> None:
        """Nothing waits for the end of a round here."""

    def close(self) -> None:
        self._live = None

    def crash(self) -> None:
        """Lose every change not yet synced (the live log is dropped at the next open)."""
        with self._lock:
            self._live = None

    def durable_entries(self) -> tuple[Entry, ...]:
        with self._lock:
            return self._durable.entries()

    @property
    def hard_state(self) -> HardState:
        with self._lock:
            return self._hard_state
