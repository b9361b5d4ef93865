"""A store-backed DLedger log reset to its leader's base: what a previous run indexed past
this run's commit (a fork's records, maybe) goes with the log; the consume queues keep no
entry the leader's records after its base would collide with."""

from __future__ import annotations

from pathlib import Path

from ha.dledger.stored.stored_log import StoredLog
from ha.dledger.stored.stored_storage import StoredDLedgerStorage
from store import Message
from store.metadata.log_records import MetadataSnapshot, QueueStart, encode
from store.record import decode_record
from store.system_topics import METADATA_TOPIC, OP_SNAPSHOT, PROPERTY_OP
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


def _snapshot_starting(topic: str, queue_id: int, queue_offset: int) -> Message:
    """A one-part metadata snapshot whose only content is a queue start."""
    part = MetadataSnapshot(0, 1, (), (), (), (QueueStart(topic, queue_id, queue_offset),))
    return Message(METADATA_TOPIC, encode(part), properties={PROPERTY_OP: OP_SNAPSHOT},
                   queue_id=0)


def test_a_recount_after_a_cut_keeps_the_queue_starts_of_a_snapshot_not_dispatched_yet(
        tmp_path: Path) -> None:
    """A member reset to its leader's base takes the leader's snapshot (Kept/0 starts at 3)
    and an entry after it, neither committed, so neither dispatched. The entry is cut: the
    counters are counted again from the queues and the records past dispatch, and Kept/0
    still goes on at 3 (before: the snapshot part past dispatch was passed over, and elected,
    the member numbered Kept/0's next message 0, below the queue's start); so after a
    restart."""
    storage, log = open_storage(tmp_path)
    log.reset(20, 3)
    leader_append(log, 3, _snapshot_starting("Kept", 0, 3))
    leader_append(log, 3, Message("T", b"uncommitted", queue_id=0))
    assert log.next_queue_offsets()[("Kept", 0)] == 3
    log.truncate_from(log.last_index)
    assert storage.store.dispatch.dispatched_offset == 0  # the snapshot part is not
    assert log.next_queue_offsets().get(("Kept", 0)) == 3
    storage.close()
    storage, log = open_storage(tmp_path)
    assert log.next_queue_offsets().get(("Kept", 0)) == 3
    entry = leader_append(log, 4, Message("Kept", b"next", queue_id=0))
    assert decode_record(entry.payload).queue_offset == 3
    storage.close()
