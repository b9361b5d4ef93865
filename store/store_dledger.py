"""A store in DLedger mode: entries written at their position by the group member, dispatch
and reads bounded by the commit limit (part of store/message_store.py's MessageStore).
"""

from __future__ import annotations

from collections.abc import Callable

from store.commit_log import CommitLog
from store.dispatch import DispatchService
from store.errors import StoreStateError
from store.health import StoreHealth
from store.status import AppendRawStatus
from store.store_lifecycle import Lifecycle

# Records a commit's thread dispatches itself (dispatch_committed): a round's commit opens tens
# to a few hundred; a follower's commit after a long catch-up may open far more, which the
# dispatch thread takes (at about 4 us a record, 512 hold the committing thread ~2 ms).
COMMIT_DISPATCH_RECORDS_MAX = 512


class DLedgerEntries:
    """DLedger mode: entries written at their position, readers bounded by the commit (part
    of MessageStore)."""

    state: Lifecycle
    health: StoreHealth
    commit_log: CommitLog
    dispatch: DispatchService
    _wake_dispatch: Callable[[], None]

    def write_entry_record(self, position: int, record: bytes) -> AppendRawStatus:
        """A DLedger entry's record at its position (CommitLog.write_entry_record)."""
        if self.state is not Lifecycle.RUNNING:
            raise StoreStateError(f"write_entry_record() on a store that is {self.state.value}")
        if not self.health.is_writable:
            return AppendRawStatus.STORE_NOT_WRITABLE
        return self.commit_log.write_entry_record(position, record)

    def set_commit_limit(self, offset: int) -> None:
        """Records below `offset` are committed: dispatch (and so reads) may go up to it.

        The committing thread (a DLedger member's host) dispatches them itself once its
        round's answers are out (`dispatch_committed`) rather than wake the dispatch thread
        here: waking that thread at every commit made the two take turns at the interpreter
        lock, and the member's process spent that turn-taking instead of serving
        (docs/dledger.md, "Dispatch on the committing thread"). If nobody calls it, the
        dispatch thread's idle poll takes the records."""
        limit = self.dispatch.limit_offset
        assert limit is not None, "the store was not opened commit_limited"
        if offset > limit:
            self.dispatch.limit_offset = offset

    def dispatch_committed(self) -> None:
        """Dispatch, on this thread, what commits opened: at most COMMIT_DISPATCH_RECORDS_MAX
        records. The dispatch thread is woken for what is left past the bound, when it is
        dispatching already, and when dispatch fails here: it retries and reports the
        failure (`last_error`) as it always did."""
        limit = self.dispatch.limit_offset
        if limit is None or limit <= self.dispatch.dispatched_offset:
            return
        try:
            caught_up = self.dispatch.dispatch_here(COMMIT_DISPATCH_RECORDS_MAX)
        except Exception:  # noqa: BLE001 - the dispatch thread meets it again and reports it
            caught_up = False
        if not caught_up:
            self._wake_dispatch()

    @property
    def commit_limit(self) -> int | None:
        return self.dispatch.limit_offset

    def truncate_uncommitted(self, offset: int) -> int:
        """Cut the log back to `offset` on any role (DLedger: an uncommitted suffix, which no
        consume queue holds). Durable at the next commit-log flush. Returns bytes cleared."""
        limit = self.dispatch.limit_offset
        assert limit is not None and offset >= limit, (offset, limit)
        with self.dispatch.changes.changing():
            return self.dispatch.hold_still(lambda: self.commit_log.truncate(offset))

    def clear_log(self) -> int:
        """Drop the whole commit log (a DLedger follower restarting from its leader's
        base); consume queues keep their committed entries."""
        with self.dispatch.changes.changing():
            return self.dispatch.hold_still(self.commit_log.delete_all)
