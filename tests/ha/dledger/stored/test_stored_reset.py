"""A store-backed DLedger log reset to its leader's base: what a previous run indexed past
this run's commit (a fork's records, maybe) goes with the log; the consume queues keep no
entry the leader's records after its base would collide with."""

from __future__ import annotations

from pathlib import Path

from ha.dledger.stored.stored_log import StoredLog
from ha.dledger.stored.stored_storage import StoredDLedgerStorage
from store import Message
from tests.support.dledger.stored import leader_append, open_storage
from tests.support.store import wait_until


def _three_dispatched(data_dir: Path) -> tuple[StoredDLedgerStorage, StoredLog]:
    """A no-op and 3 messages to T/0, committed and dispatched."""
    storage, log = open_storage(data_dir)
    leader_append(log, 1, None)
    for number in range(3):
        leader_append(log, 1, Message("T", b"m-%d" % number, queue_id=0))
    storage.set_committed(log.last_index)
    store = storage.store
    limit = store.commit_limit
    assert limit is not None
    wait_until(lambda: store.dispatch.dispatched_offset >= limit)
    assert store.queue_offset_range("T", 0) == (0, 3)
    return storage, log


def test_a_reset_cuts_the_queue_entries_a_previous_run_dispatched_past_the_commit(
        tmp_path: Path) -> None:
    """A member led alone and dispatched 3 messages of its own to T/0 (committed in that
    run). Restarted with the group's peers its commit is its base again, and its leader
    resets it to a base further on: T/0 keeps none of those entries (before: 3, and the
    leader's T/0 records after the base would have landed on queue offsets the forked
    entries held), and the metadata it applied is cut with them."""
    storage, _ = _three_dispatched(tmp_path)
    storage.close()

    storage, log = open_storage(tmp_path)
    assert log.committed_index == 0
    log.reset(20, 3)
    range_after = storage.store.queue_offset_range("T", 0)
    assert range_after is None or range_after[1] == 0, range_after
    assert log.forks_cut_count == 1
    storage.close()


def test_a_reset_keeps_the_entries_this_runs_leader_confirmed(tmp_path: Path) -> None:
    """Entries this run's leader committed are the group's: a reset past them keeps their
    queue entries (the queue goes on from their end)."""
    storage, log = _three_dispatched(tmp_path)
    store = storage.store
    log.reset(20, 3)
    assert store.queue_offset_range("T", 0) == (0, 3)
    assert log.forks_cut_count == 0
    storage.close()
