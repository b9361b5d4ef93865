"""What a DLedger host needs from its disk: the contract between the host loop and a log store.

The node (ha/dledger/core/node.py) reads and changes its log only through `NodeLog`. A change made
through it (append, truncate, reset, compact) is visible at once (page cache) but durable only
after `DLedgerStorage.sync()`. The host runs the node's write actions like this:

- `PersistTermVote`: `persist_term_vote(term, voted_for)`, durable when it returns;
- `AppendEntries` / `TruncateFrom` / `ResetLog`: already applied to the log by the node through
  `NodeLog`; the host makes them durable with one `sync()` (group commit: one sync for every
  write issued so far), then calls `node.persisted(last_write_id)`.

The host calls `persisted(n)` only after every write up to `n` is durable, so votes and push
answers never rest on state a crash can take back; with `HostConfig.sync_before_ack=False`
(ASYNC_FLUSH) "durable" means in the page cache, which a killed process keeps, and `sync()`
runs every `sync_interval_ms` (docs/dledger.md, "What an acknowledgement rests on").
 Two implementations: `ha.dledger.core.entry_log.EntryLog` in memory (the simulation and host
tests), and the store-backed log whose entries are the commit log's V1 records, written at the
leader's
position on every member.
"""

from __future__ import annotations

from typing import Protocol

from ha.dledger.core.member import HardState
from ha.dledger.core.messages import Entry


class LogWriteError(OSError):
    """The disk refused an entry (`append`, `append_many`): nothing of that entry is kept, the
    entries before it in an `append_many` stay. The node answers the refused client appends
    with DISK_ERROR and goes on (a disk that recovers takes the next)."""


class NodeLog(Protocol):
    """Entries after a base (the entry before the first retained one); indexes start at 1."""

    @property
    def base_index(self) -> int: ...

    @property
    def base_term(self) -> int: ...

    @property
    def last_index(self) -> int: ...

    @property
    def last_term(self) -> int: ...

    def term_at(self, index: int) -> int | None: ...

    def crc_at(self, index: int) -> int | None:
        """The CRC-32 of the payload at `index` (messages.payload_crc); None at or below the
        base and past the end."""
        ...

    def entry(self, index: int) -> Entry: ...

    def slice(self, first_index: int, count_max: int) -> tuple[Entry, ...]: ...

    def append(self, entry: Entry) -> None: ...

    def append_many(self, entries: tuple[Entry, ...]) -> None:
        """`append` of each in order (a refused one raises, those before it stay); a
        store-backed log writes a push's records, and a leader's round of appends, together."""
        ...

    def truncate_from(self, index: int) -> None: ...

    def reset(self, base_index: int, base_term: int) -> None: ...

    def compact_to(self, index: int) -> None: ...

    def matches(self, index: int, term: int) -> bool: ...

    def conflict_hint(self, index: int, term: int) -> tuple[int, int]: ...

    def at_least_as_new(self, last_index: int, last_term: int) -> bool: ...


class DLedgerStorage(Protocol):
    def open(self) -> tuple[HardState, NodeLog]:
        """Recover and return the durable term, vote and log (uncommitted entries included:
        the leader confirms or truncates them)."""
        ...

    def persist_term_vote(self, term: int, voted_for: str | None) -> None:
        """Durable when it returns."""
        ...

    def sync(self) -> None:
        """Every change made through the NodeLog so far is durable when it returns."""
        ...

    def start_appends(self) -> None:
        """The host is about to encode a round of client appends, to append them together:
        a store-backed log places each record after the ones encoded before it since this
        call (where the whole run will lie), rather than all at the log's present end."""
        ...

    def set_committed(self, index: int) -> None:
        """Entries up to `index` are committed: readers (consume queues, reads, snapshots,
        HTTP answers) may see them, and never anything past them."""
        ...

    def after_round(self) -> None:
        """The host's round is over and its answers are out: work that a commit made due
        and that no answer waits for (a store-backed log dispatches the records the round
        committed to their consume queues) runs here, on the host thread."""
        ...

    def close(self) -> None: ...
