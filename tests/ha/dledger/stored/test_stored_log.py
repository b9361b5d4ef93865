"""The store-backed DLedger log: entries as V1 records at the leader's position, the index,
truncate/reset/compact, and readers bounded by the committed position."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.messages import Entry
from ha.dledger.stored import stored_log
from ha.dledger.stored.placement import EntryRecordError, EntryWriteError
from ha.dledger.stored.state_files import read_hard_state
from ha.dledger.stored.stored_log import StoredLog
from ha.dledger.stored.stored_storage import StoredDLedgerStorage
from store import AppendRawStatus, Message, MessageStore, StoreCorruptError, store_dledger
from store.files.mapped_file import MappedFile
from store.files.mapped_file_queue import MappedFileQueue
from store.message_id import LookupStatus
from store.paths import StorePaths
from store.reads import GetMessageStatus
from store.record import HEADER_SIZE, decode_record
from store.system_topics import (
    METADATA_TOPIC,
    OP_TOPIC_DELETE,
    PROPERTY_OP,
    PROPERTY_SUBJECT_TOPIC,
)
from tests.support.dledger.stored import (
    FILE_SIZE_BYTES,
    INDEX_ENTRIES_PER_FILE,
    body,
    commit_log_files,
    leader_append,
    open_storage,
)
from tests.support.store import wait_until


def _fill(log: StoredLog, count: int, seed: int = 1, term: int = 1) -> list[Entry]:
    """`count` entries of term `term` (a no-op first), bodies of mixed sizes that roll files."""
    rng = random.Random(seed)
    entries = [leader_append(log, term, None)]
    for number in range(count):
        size = rng.choice([10, 300, 3000, 4000])
        entries.append(leader_append(log, term, Message("T", body(number, size))))
    return entries


def _bodies(storage: StoredDLedgerStorage, queue_id: int) -> list[bytes]:
    result = storage.store.get_messages("T", queue_id, 0, 1000, max_bytes=1 << 30)
    return [m.body for m in result.messages]


def _wait_dispatched(storage: StoredDLedgerStorage) -> None:
    store = storage.store
    limit = store.commit_limit
    assert limit is not None
    wait_until(lambda: store.dispatch.dispatched_offset >= limit)


def test_follower_commit_log_is_a_byte_copy_of_the_leader(tmp_path: Path) -> None:
    """A follower that appends the leader's entries (across file rolls, with no-ops of
    several terms) ends with commit-log files byte-identical to the leader's."""
    leader, leader_log = open_storage(tmp_path / "leader")
    follower, follower_log = open_storage(tmp_path / "follower")
    entries = _fill(leader_log, 60, term=1) + _fill(leader_log, 30, seed=2, term=3)
    for entry in entries:
        follower_log.append(entry)
    assert leader_log.end_position > 3 * FILE_SIZE_BYTES  # several files
    assert follower_log.last_index == leader_log.last_index == len(entries)
    assert [follower_log.entry(i) for i in range(1, len(entries) + 1)] == entries
    leader.close()
    follower.close()
    assert commit_log_files(tmp_path / "leader") == commit_log_files(tmp_path / "follower")


def _index_files(data_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes()
            for path in sorted(StorePaths(data_dir).dledger_index_dir.iterdir())}


@pytest.mark.parametrize("seed", range(4))
def test_append_many_writes_the_same_bytes_as_append_one_by_one(
        tmp_path: Path, seed: int) -> None:
    """A follower taking the leader's entries in pushes of random sizes (append_many) ends
    with the same commit-log and index files as one taking them one by one, across file
    rolls, index files and no-ops of several terms, and reads them back after a restart."""
    rng = random.Random(seed)
    leader, leader_log = open_storage(tmp_path / "leader")
    entries = _fill(leader_log, 100, seed=seed) + _fill(leader_log, 40, seed=seed + 9, term=2)
    assert leader_log.last_index > 2 * INDEX_ENTRIES_PER_FILE
    next_place = _place(leader_log.encode(Message("T", b"next", queue_id=1)))
    one, one_log = open_storage(tmp_path / "one")
    for entry in entries:
        one_log.append(entry)
    many, many_log = open_storage(tmp_path / "many")
    start = 0
    while start < len(entries):
        count = rng.randint(1, 40)
        many_log.append_many(tuple(entries[start:start + count]))
        start += count
    assert (many_log.last_index, many_log.last_term, many_log.end_position) == (
        one_log.last_index, one_log.last_term, one_log.end_position)
    for storage in (leader, one, many):
        storage.close()
    for name in ("leader", "one"):
        assert commit_log_files(tmp_path / name) == commit_log_files(tmp_path / "many")
        assert _index_files(tmp_path / name) == _index_files(tmp_path / "many")
    many, many_log = open_storage(tmp_path / "many")
    assert [many_log.entry(i) for i in range(1, len(entries) + 1)] == entries
    assert _place(many_log.encode(Message("T", b"next", queue_id=1))) == next_place
    many.close()


def _place(encoded: bytes | tuple[object, str]) -> tuple[int, int]:
    """The queue offset and position an encoded record was given."""
    assert isinstance(encoded, bytes), encoded
    record = decode_record(encoded)
    return record.queue_offset, record.commit_log_offset


def test_append_many_writes_a_push_of_records_with_one_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A push of records that lie back to back in one commit-log file costs one commit-log
    write (and a record that starts the next file starts a new write)."""
    leader, leader_log = open_storage(tmp_path / "leader")
    entries = [leader_append(leader_log, 1, None)]
    entries += [leader_append(leader_log, 1, Message("T", body(n, 100))) for n in range(16)]
    follower, follower_log = open_storage(tmp_path / "follower")
    writes: list[int] = []
    real_write = MessageStore.write_entry_record

    def counting_write(store: MessageStore, position: int, record: bytes) -> AppendRawStatus:
        writes.append(len(record))
        return real_write(store, position, record)

    monkeypatch.setattr(MessageStore, "write_entry_record", counting_write)
    follower_log.append_many(tuple(entries))
    assert writes == [sum(len(entry.payload) for entry in entries)]
    assert [follower_log.entry(i) for i in range(1, 18)] == entries
    leader.close()
    follower.close()


def test_append_many_asserts_each_index_before_writing_anything(tmp_path: Path) -> None:
    """A push with a gap in its indexes (a bug upstream) fails the assertion `append` makes of
    each entry, before any record of the push is written."""
    leader, leader_log = open_storage(tmp_path / "leader")
    entries = _fill(leader_log, 4)
    follower, follower_log = open_storage(tmp_path / "follower")
    follower_log.append(entries[0])
    with pytest.raises(AssertionError):
        follower_log.append_many((entries[1], entries[3]))
    assert (follower.store.max_offset, follower_log.last_index) == (0, 1)
    leader.close()
    follower.close()


def test_append_many_keeps_the_entries_before_a_refused_one(tmp_path: Path) -> None:
    """In a push whose fourth record is damaged, append_many appends the three before it
    (as append one by one would), then raises EntryRecordError with nothing of the rest."""
    leader, leader_log = open_storage(tmp_path / "leader")
    entries = _fill(leader_log, 6)
    damaged = bytearray(entries[4].payload)
    damaged[HEADER_SIZE] ^= 0xFF
    push = (*entries[:4], Entry(5, 1, bytes(damaged)), *entries[5:])
    follower, follower_log = open_storage(tmp_path / "follower")
    with pytest.raises(EntryRecordError, match="body CRC"):
        follower_log.append_many(push)
    assert follower_log.last_index == 4
    assert follower.store.max_offset == follower_log.end_position == leader_log.end_of(4)
    follower_log.append_many(tuple(entries[4:]))
    leader.close()
    follower.close()
    assert commit_log_files(tmp_path / "leader") == commit_log_files(tmp_path / "follower")


def test_a_record_not_at_the_next_position_is_refused_and_nothing_is_written(
        tmp_path: Path) -> None:
    """A payload whose physical offset is not this log's next position (or not a record at
    all) raises EntryRecordError and leaves the commit log and the index unchanged."""
    leader, leader_log = open_storage(tmp_path / "leader")
    follower, follower_log = open_storage(tmp_path / "follower")
    entries = _fill(leader_log, 3)
    follower_log.append(entries[0])
    max_offset = follower.store.max_offset
    with pytest.raises(EntryRecordError, match="next position"):
        follower_log.append(Entry(2, 1, entries[2].payload))  # the record meant for later
    with pytest.raises(EntryRecordError, match="not a valid record"):
        follower_log.append(Entry(2, 1, b"garbage" * 20))
    assert follower.store.max_offset == max_offset
    assert follower_log.last_index == 1
    leader.close()
    follower.close()


def test_encode_has_no_side_effect_until_the_append(tmp_path: Path) -> None:
    """encode() numbers the record after every entry appended (uncommitted ones included)
    and changes nothing: after start_encoding() an encode gives the same queue offset and
    position again; the counters move when the entry is appended."""
    storage, log = open_storage(tmp_path, default_queue_count=1)
    _fill(log, 5)
    log.start_encoding()
    first = log.encode(Message("T", b"x"))
    log.start_encoding()
    second = log.encode(Message("T", b"x"))
    assert isinstance(first, bytes) and isinstance(second, bytes)
    assert decode_record(first).queue_offset == decode_record(second).queue_offset == 5
    assert decode_record(first).commit_log_offset == log.end_position
    assert log.last_index == 6  # a no-op and five records
    log.append(Entry(log.last_index + 1, 1, second))
    log.start_encoding()
    third = log.encode(Message("T", b"x"))
    assert isinstance(third, bytes) and decode_record(third).queue_offset == 6
    storage.close()


def test_the_leaders_own_encoded_record_is_appended_without_parsing_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The very object the last encode() returned is appended without check_entry_record;
    an equal copy of it (another object) is parsed and checked as any follower's entry."""
    checked: list[bytes] = []
    real_check = stored_log.check_entry_record

    def counting_check(payload: bytes) -> tuple[str, int, int, int]:
        checked.append(payload)
        return real_check(payload)

    monkeypatch.setattr(stored_log, "check_entry_record", counting_check)
    storage, log = open_storage(tmp_path)
    entries = _fill(log, 3)
    assert checked == []
    encoded = log.encode(Message("T", b"copied"))
    assert isinstance(encoded, bytes)
    copy = bytes(bytearray(encoded))
    log.append(Entry(log.last_index + 1, 1, copy))
    assert checked == [copy]
    assert [log.entry(entry.index) for entry in entries] == entries
    storage.close()


def test_a_different_payload_after_an_encode_is_still_checked(tmp_path: Path) -> None:
    """After encode(), a payload that is not that very object (here the encoded record with
    one body byte flipped: same size, same position) is refused, and nothing is written."""
    storage, log = open_storage(tmp_path)
    _fill(log, 3)
    encoded = log.encode(Message("T", b"the body"))
    assert isinstance(encoded, bytes)
    damaged = bytearray(encoded)
    damaged[HEADER_SIZE] ^= 0xFF
    max_offset = storage.store.max_offset
    with pytest.raises(EntryRecordError, match="not a valid record: body CRC"):
        log.append(Entry(log.last_index + 1, 1, bytes(damaged)))
    assert (storage.store.max_offset, log.last_index) == (max_offset, 4)
    log.append(Entry(5, 1, encoded))  # the encoded record itself, checked now, goes in
    assert log.entry(5).payload == encoded
    storage.close()


def test_an_encoded_record_is_refused_once_the_log_moved_past_its_position(
        tmp_path: Path) -> None:
    """An encoded record appended after the log's end moved (a truncation between the
    encode and the append) is refused: its position is checked even when it is not parsed."""
    storage, log = open_storage(tmp_path)
    _fill(log, 3)
    encoded = log.encode(Message("T", b"late"))
    assert isinstance(encoded, bytes)
    log.truncate_from(log.last_index)
    with pytest.raises(EntryRecordError, match="next position"):
        log.append(Entry(log.last_index + 1, 1, encoded))
    storage.close()


@pytest.mark.parametrize("records_before", [True, False])
def test_an_entry_the_index_refuses_leaves_no_record_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, records_before: bool) -> None:
    """When the index cannot create the file an entry's slot starts (a full disk), append
    raises EntryWriteError and the record it wrote goes again (cut back after the records
    before it, or the whole commit log when it was the first); the same entry then appends
    as if nothing had happened."""
    leader, leader_log = open_storage(tmp_path / "leader")
    follower, follower_log = open_storage(tmp_path / "follower")
    before = INDEX_ENTRIES_PER_FILE - 2  # then the refused entry takes the next file's slot 0
    if records_before:
        entries = _fill(leader_log, before)
    else:
        entries = [leader_append(leader_log, 1, None) for _ in range(before + 1)]
    entries.append(leader_append(leader_log, 1, Message("T", b"refused once")))
    follower_log.append_many(tuple(entries[:-1]))
    max_offset = follower.store.max_offset
    real_writable_file = MappedFileQueue.writable_file
    index_dir = StorePaths(tmp_path / "follower").dledger_index_dir

    def refuse_index_files(files: MappedFileQueue, start_if_empty: int = 0) -> MappedFile:
        if files.directory == index_dir:
            raise OSError(28, "No space left on device")
        return real_writable_file(files, start_if_empty)

    with monkeypatch.context() as patched:
        patched.setattr(MappedFileQueue, "writable_file", refuse_index_files)
        with pytest.raises(EntryWriteError, match="CREATE_MAPPED_FILE_FAILED"):
            follower_log.append_many((entries[-1],))
    assert (follower.store.max_offset, follower_log.last_index) == (max_offset,
                                                                     len(entries) - 1)
    assert follower_log.end_position == leader_log.end_of(len(entries) - 1)
    follower_log.append(entries[-1])
    leader.close()
    follower.close()
    assert commit_log_files(tmp_path / "leader") == commit_log_files(tmp_path / "follower")


def test_encode_refuses_an_invalid_message_with_a_status(tmp_path: Path) -> None:
    """An invalid topic is refused as a status (no exception, nothing appended)."""
    storage, log = open_storage(tmp_path)
    refused = log.encode(Message("bad topic!", b"x"))
    assert isinstance(refused, tuple) and refused[0].value == "MESSAGE_ILLEGAL"
    assert log.last_index == 0
    storage.close()


def test_truncate_rolls_back_positions_and_queue_offsets(tmp_path: Path) -> None:
    """After truncate_from, the next record takes the truncated one's queue offset and the
    end of the entry before it, even where the truncated one had rolled to a new file."""
    storage, log = open_storage(tmp_path, default_queue_count=1)
    _fill(log, 4)
    # Fill the current file until a 3000-byte record rolls to the next one.
    while True:
        end_before = log.end_position
        entry = leader_append(log, 1, Message("T", body(99, 3000)))
        if decode_record(entry.payload).commit_log_offset != end_before:
            break
    rolled_index = entry.index
    log.truncate_from(rolled_index)
    assert log.last_index == rolled_index - 1
    small = log.encode(Message("T", b"small"))
    assert isinstance(small, bytes)
    assert decode_record(small).commit_log_offset == end_before  # back in the old file
    assert decode_record(small).queue_offset == rolled_index - 2  # the no-op has none
    log.append(Entry(rolled_index, 2, small))
    storage.close()
    storage, log = open_storage(tmp_path, default_queue_count=1)
    assert log.last_index == rolled_index and log.entry(rolled_index).payload == small
    storage.close()


def test_truncate_at_or_below_the_commit_is_refused(tmp_path: Path) -> None:
    """truncate_from never removes a committed entry (an assertion, on any role)."""
    storage, log = open_storage(tmp_path)
    _fill(log, 4)
    storage.set_committed(3)
    with pytest.raises(AssertionError):
        log.truncate_from(3)
    storage.close()


def test_readers_stop_at_the_committed_position(tmp_path: Path) -> None:
    """Uncommitted entries are never dispatched, read or confirmed; set_committed opens
    exactly the records up to the committed entry."""
    storage, log = open_storage(tmp_path, default_queue_count=1)
    entries = _fill(log, 10)
    storage.sync()
    assert storage.store.get_messages("T", 0, 0, 100).status \
        is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert storage.store.confirmed_offset == 0
    storage.set_committed(6)  # the no-op and five records
    _wait_dispatched(storage)
    assert _bodies(storage, 0) == [decode_record(e.payload).body for e in entries[1:6]]
    assert storage.store.confirmed_offset == log.end_of(6)
    storage.close()


def test_the_host_dispatches_a_commit_on_its_thread_and_appends_past_it_wake_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commit-limited, an append past the commit wakes no dispatch (it could read nothing);
    the commit moves the limit and wakes nothing either, and `after_round` (the host's, at
    the end of a round) dispatches what it opened on the host's thread, so its records are in
    their queue when it returns. A commit learnt before its bytes arrived (a follower) leaves
    committed bytes to dispatch, so the append that brings them wakes the dispatch thread."""
    storage, log = open_storage(tmp_path, default_queue_count=1)
    store = storage.store
    wakes: list[int] = []
    monkeypatch.setattr(store, "_wake_dispatch", lambda: wakes.append(store.commit_log.max_offset))
    entries = _fill(log, 3)
    assert wakes == []
    storage.set_committed(4)
    assert store.commit_limit == log.end_of(4) and wakes == []
    storage.after_round()  # the host, once its round's answers are out
    assert store.dispatch.dispatched_offset == log.end_of(4)
    assert _bodies(storage, 0) == [decode_record(e.payload).body for e in entries[1:4]]
    assert wakes == []
    store.set_commit_limit(log.end_of(4) + len(entries[1].payload))  # ahead of the bytes
    leader_append(log, 1, Message("T", body(9, 10)))
    assert wakes == [store.commit_log.max_offset]
    storage.close()


def test_the_commit_leaves_to_the_dispatch_thread_what_is_past_its_bound_or_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`after_round` dispatches at most COMMIT_DISPATCH_RECORDS_MAX records and wakes the
    dispatch thread for the rest; it dispatches nothing and wakes the thread when the thread
    holds dispatch; and a dispatch that fails there wakes the thread (which retries and
    reports it) instead of failing the host's round."""
    monkeypatch.setattr(store_dledger, "COMMIT_DISPATCH_RECORDS_MAX", 2)
    storage, log = open_storage(tmp_path, default_queue_count=1)
    store = storage.store
    wakes: list[int] = []
    monkeypatch.setattr(store, "_wake_dispatch", lambda: wakes.append(1))
    _fill(log, 6)
    storage.set_committed(4)  # the no-op and 3 records: 2 here, the third to the thread
    storage.after_round()
    assert len(_bodies(storage, 0)) == 2 and wakes == [1]
    _wait_dispatched(storage)  # the thread, on its idle poll (its wake went to the spy)

    def commit_while_the_thread_dispatches() -> int:
        storage.set_committed(5)
        storage.after_round()
        return 0

    store.dispatch.hold_still(commit_while_the_thread_dispatches)  # holds dispatch meanwhile
    assert len(wakes) == 2 and len(_bodies(storage, 0)) == 3  # busy: left to the thread
    _wait_dispatched(storage)

    def failing(records_max: int) -> bool:
        raise OSError("no space left on device")

    monkeypatch.setattr(store.dispatch, "dispatch_here", failing)
    storage.set_committed(6)
    storage.after_round()
    assert len(wakes) == 3 and store.commit_limit == log.end_of(6)
    storage.close()


def test_a_message_id_past_the_commit_is_not_found(tmp_path: Path) -> None:
    """A look-up by message id stops at the committed position too: an uncommitted record
    (which a leader already named in its 202 answer) is NOT_FOUND until it commits."""
    storage, log = open_storage(tmp_path, default_queue_count=1)
    entries = _fill(log, 3)
    storage.sync()
    storage.set_committed(2)  # the no-op and the first record
    committed, held = (decode_record(entry.payload) for entry in entries[1:3])
    assert storage.store.get_message_by_id(committed.msg_id).status is LookupStatus.FOUND
    assert storage.store.get_message_by_id(held.msg_id).status is LookupStatus.NOT_FOUND
    storage.set_committed(3)
    found = storage.store.get_message_by_id(held.msg_id)
    assert found.status is LookupStatus.FOUND and found.message is not None
    assert found.message.body == held.body
    storage.close()

def test_after_a_restart_nothing_new_is_dispatched_or_read_before_the_commit_is_known(
        tmp_path: Path) -> None:
    """A restart keeps the uncommitted entries and dispatches none of them; what the last
    run dispatched is read again only once a commit covers it (a member that led alone
    under another peer list dispatched records its group never committed); the rest is
    dispatched once the commit reaches it."""
    storage, log = open_storage(tmp_path, default_queue_count=1)
    entries = _fill(log, 10)
    storage.set_committed(4)
    _wait_dispatched(storage)
    storage.close()
    storage, log = open_storage(tmp_path, default_queue_count=1)
    assert log.last_index == len(entries)
    assert storage.store.dispatch.limit_offset == 0
    assert _bodies(storage, 0) == []
    storage.set_committed(4)
    assert _bodies(storage, 0) == [decode_record(e.payload).body for e in entries[1:4]]
    storage.set_committed(len(entries))
    _wait_dispatched(storage)
    assert _bodies(storage, 0) == [decode_record(e.payload).body for e in entries[1:]]
    storage.close()


def test_reset_drops_the_log_and_the_next_record_starts_a_file(tmp_path: Path) -> None:
    """reset() empties the log at the new base; the next record must start a file (the
    leader's first retained one), and the log recovers at that base after a restart."""
    leader, leader_log = open_storage(tmp_path / "leader")
    follower, follower_log = open_storage(tmp_path / "follower")
    entries = _fill(leader_log, 30)
    first_file_record = next(e for e in entries[2:] if e.payload
                             and decode_record(e.payload).commit_log_offset % FILE_SIZE_BYTES == 0)
    for entry in entries[:3]:
        follower_log.append(entry)
    base = first_file_record.index - 1
    follower_log.reset(base, 1)
    assert (follower_log.base_index, follower_log.last_index) == (base, base)
    assert follower.store.max_offset == 0
    with pytest.raises(EntryRecordError, match="starts a file"):
        follower_log.append(Entry(base + 1, 1, entries[2].payload))  # mid-file
    for entry in entries[base:]:
        follower_log.append(entry)
    follower.close()
    follower, follower_log = open_storage(tmp_path / "follower")
    assert (follower_log.base_index, follower_log.last_index) == (base, len(entries))
    assert follower_log.entry(len(entries)) == entries[-1]
    follower.close()
    leader.close()


def test_compaction_follows_retention_and_the_base_survives_a_restart(tmp_path: Path) -> None:
    """compactable_index is the last committed entry below the first retained commit-log
    file; compact_to it moves the base (durably) and removes index files below it."""
    storage, log = open_storage(tmp_path)
    entries = _fill(log, 150)
    storage.set_committed(len(entries))
    _wait_dispatched(storage)
    storage.sync()
    index_dir = StorePaths(tmp_path).dledger_index_dir
    index_files_before = len(list(index_dir.iterdir()))
    files = storage.store.commit_log.files
    files.delete_first(len(files.files) - 1)  # what retention does: all but the last
    target = log.compactable_index()
    assert decode_record(entries[target].payload).commit_log_offset \
        == storage.store.commit_log.min_offset
    log.compact_to(target)
    assert (log.base_index, log.base_term) == (target, 1)
    assert len(list(index_dir.iterdir())) < index_files_before
    storage.close()
    storage, log = open_storage(tmp_path)
    assert (log.base_index, log.last_index) == (target, len(entries))
    assert log.entry(target + 1) == entries[target]
    storage.close()


def test_conflict_hint_and_terms_agree_with_the_in_memory_log(tmp_path: Path) -> None:
    """term_at, matches and the binary-search conflict_hint answer as EntryLog does."""
    storage, log = open_storage(tmp_path)
    memory = EntryLog()
    rng = random.Random(5)
    term = 1
    for number in range(60):
        term += rng.random() < 0.2
        entry = leader_append(log, term, Message("T", body(number, 20)) if number % 3 else None)
        memory.append(entry)
    for index in range(0, 62):
        assert log.term_at(index) == memory.term_at(index)
        for probe_term in range(0, term + 2):
            assert log.conflict_hint(index, probe_term) == memory.conflict_hint(index, probe_term)
    storage.close()


def test_hard_state_is_durable_and_a_damaged_file_stops_the_start(tmp_path: Path) -> None:
    """persist_term_vote survives a restart; a damaged hard-state file is refused."""
    storage, _ = open_storage(tmp_path)
    storage.persist_term_vote(7, "n2")
    storage.close()
    path = StorePaths(tmp_path).dledger_hard_state
    assert read_hard_state(path).term == 7 and read_hard_state(path).voted_for == "n2"
    storage = StoredDLedgerStorage(storage.config)
    hard_state, _ = storage.open()
    assert (hard_state.term, hard_state.voted_for) == (7, "n2")
    storage.close()
    raw = bytearray(path.read_bytes())
    raw[5] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreCorruptError, match="CRC"):
        StoredDLedgerStorage(storage._config).open()  # noqa: SLF001


def test_recovery_drops_the_first_bad_entry_and_everything_after_it(tmp_path: Path) -> None:
    """A record damaged on disk ends the recovered log at the entry before it: its index
    entries go, and the commit log is cut at the end of the last kept record."""
    storage, log = open_storage(tmp_path)
    entries = _fill(log, 12)
    damaged = entries[8]
    damaged_at = decode_record(damaged.payload).commit_log_offset
    keep_end = log.end_of(damaged.index - 1)
    storage.close()
    path = tmp_path / "commitlog" / f"{damaged_at - damaged_at % FILE_SIZE_BYTES:020d}"
    raw = bytearray(path.read_bytes())
    raw[damaged_at % FILE_SIZE_BYTES + 100] ^= 0xFF  # inside the body: its CRC fails
    path.write_bytes(bytes(raw))
    storage, log = open_storage(tmp_path)
    assert log.last_index == damaged.index - 1
    assert storage.recovery is not None and storage.recovery.first_problem is not None
    assert storage.store.max_offset == keep_end
    assert [log.entry(i) for i in range(1, log.last_index + 1)] == entries[:damaged.index - 1]
    storage.close()


def test_recovery_cuts_commit_log_bytes_past_the_last_indexed_entry(tmp_path: Path) -> None:
    """Records the index does not name (an append whose index entry was lost) are cut:
    they were never acknowledged, and the next entry goes in their place."""
    storage, log = open_storage(tmp_path)
    _fill(log, 6)
    end = log.end_position
    storage.sync()
    leader_append(log, 1, Message("T", b"lost index entry"))
    storage.store.commit_log.flush()  # the record reached the disk, its index entry did not
    index_file = StorePaths(tmp_path).dledger_index_dir / f"{0:020d}"
    storage.halt()
    raw = bytearray(index_file.read_bytes())
    slot = (log.last_index) * 40
    raw[slot:slot + 40] = bytes(40)
    index_file.write_bytes(bytes(raw))
    storage, log = open_storage(tmp_path)
    assert log.last_index == 7 and log.end_position == end
    assert storage.store.max_offset == end
    assert storage.recovery is not None and storage.recovery.cut_bytes > 0
    storage.close()


HOLD_MAX = 1 << 40  # no peer is too far behind


def test_retention_keeps_what_a_lagging_peer_needs_and_says_so(tmp_path: Path) -> None:
    """With a hold for a peer matched at an early entry, retention removes only the files
    before that entry's record and reports the first file it kept for the peer."""
    storage, log = open_storage(tmp_path, file_reserved_hours=1e-9,
                                retention_interval_ms=3_600_000)
    entries = _fill(log, 150)
    storage.set_committed(len(entries))
    _wait_dispatched(storage)
    needed = next(e for e in entries if e.payload
                  and decode_record(e.payload).commit_log_offset > 2 * FILE_SIZE_BYTES)
    log.hold_retention_for([needed.index - 1], HOLD_MAX)  # the peer's match: it needs `needed` next
    retention = storage.store.retention
    removed = retention.delete_expired()
    needed_at = decode_record(needed.payload).commit_log_offset
    assert removed == 2
    assert storage.store.min_offset <= needed_at
    assert retention.blocked_offset == storage.store.min_offset
    log.hold_retention_for([log.last_index], HOLD_MAX)  # every peer caught up: no file is held back
    assert retention.delete_expired() > 0 and retention.blocked_offset is None
    storage.close()


def test_a_peer_too_far_behind_holds_nothing_back(tmp_path: Path) -> None:
    """A peer matched further back than the bound (ha_slave_fall_behind_bytes_max; down, or
    far behind) does not stop retention: an unbounded hold would fill the disk. It is reset from
    the base when it returns. A peer within the bound still holds its files."""
    storage, log = open_storage(tmp_path, file_reserved_hours=1e-9,
                                retention_interval_ms=3_600_000)
    entries = _fill(log, 150)
    storage.set_committed(len(entries))
    _wait_dispatched(storage)
    assert log.end_position > 4 * FILE_SIZE_BYTES  # the first entry is past the bound
    near = next(e for e in entries if e.payload and decode_record(e.payload).commit_log_offset
                > log.end_position - 2 * FILE_SIZE_BYTES)
    # one peer far behind, one within the bound
    log.hold_retention_for([1, near.index - 1], 3 * FILE_SIZE_BYTES)
    retention = storage.store.retention
    retention.delete_expired()
    assert storage.store.min_offset > decode_record(entries[1].payload).commit_log_offset
    assert storage.store.min_offset <= decode_record(near.payload).commit_log_offset
    assert retention.blocked_offset == storage.store.min_offset
    storage.close()


def test_a_round_of_encodes_lies_back_to_back_and_goes_in_with_one_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After start_encoding, each encode places its record after the one before (queue
    offsets counted on per queue, across a file end too) without changing the log; the run
    then goes in unparsed, a write per file, and reads back as encoded. The next round
    starts again from the log's end."""
    checked: list[bytes] = []
    real_check = stored_log.check_entry_record
    monkeypatch.setattr(stored_log, "check_entry_record",
                        lambda payload: checked.append(payload) or real_check(payload))
    storage, log = open_storage(tmp_path)
    _fill(log, 3)
    writes: list[int] = []
    real_write = storage.store.write_entry_record
    monkeypatch.setattr(storage.store, "write_entry_record",
                        lambda position, records: writes.append(position)
                        or real_write(position, records))
    last_index, end_position = log.last_index, log.end_position
    log.start_encoding()
    payloads = []
    for number in range(24):  # 24 x 3 KiB: past the end of a 40 KiB file
        encoded = log.encode(Message("T", body(number, 3000), queue_id=number % 2))
        assert isinstance(encoded, bytes)
        payloads.append(encoded)
    assert (log.last_index, log.end_position) == (last_index, end_position)
    records = [decode_record(payload) for payload in payloads]
    expected_end = end_position
    for payload, record in zip(payloads, records, strict=True):
        if record.commit_log_offset != expected_end:  # only where the record meets a file end
            assert record.commit_log_offset % FILE_SIZE_BYTES == 0
            assert record.commit_log_offset - expected_end < len(payload) + 8
        expected_end = record.commit_log_offset + len(payload)
    for queue_id in (0, 1):
        offsets = [r.queue_offset for r in records if r.queue_id == queue_id]
        assert offsets == list(range(offsets[0], offsets[0] + 12))
    log.append_many(tuple(Entry(last_index + 1 + n, 1, p) for n, p in enumerate(payloads)))
    assert checked == []
    files_spanned = len({r.commit_log_offset // FILE_SIZE_BYTES for r in records})
    assert files_spanned > 1 and len(writes) == files_spanned
    assert [log.entry(last_index + 1 + n).payload for n in range(24)] == payloads
    log.start_encoding()
    again = log.encode(Message("T", b"next", queue_id=0))
    assert isinstance(again, bytes) and decode_record(again).commit_log_offset == expected_end
    storage.close()


def test_a_record_not_of_the_round_ends_it(tmp_path: Path) -> None:
    """Appending a record the round did not encode (a follower's entry) ends the run: the
    next encode places its record after that record, not after the stale run."""
    storage, log = open_storage(tmp_path)
    other_storage, other = open_storage(tmp_path / "other")
    entries = _fill(other, 2)
    foreign = leader_append(other, 1, Message("T", b"from another leader"))
    log.start_encoding()
    stale = log.encode(Message("T", b"never appended"))
    assert isinstance(stale, bytes)
    log.append_many(tuple(entries) + (foreign,))  # this log now follows `other`
    placed = log.encode(Message("T", b"after the foreign record"))
    assert isinstance(placed, bytes)
    assert decode_record(placed).commit_log_offset == log.end_position
    log.append(Entry(log.last_index + 1, 1, placed))
    assert log.entry(log.last_index).payload == placed
    storage.close()
    other_storage.close()


def test_end_of_from_memory_agrees_with_the_index(tmp_path: Path) -> None:
    """end_of answers the last entry and recent records from memory: the same offsets the
    index holds, for records, no-ops and records that start a file, after a truncation too."""
    storage, log = open_storage(tmp_path)
    _fill(log, 40)
    leader_append(log, 2, None)  # a no-op after records
    _fill(log, 5, seed=3, term=2)

    def agrees() -> None:
        for index in range(log.base_index + 1, log.last_index + 1):
            assert log.end_of(index) == log.index_entry(index).end_position, index
        assert log.end_of(log.last_index) == log.end_position

    agrees()
    log.truncate_from(log.last_index - 2)
    agrees()
    leader_append(log, 2, Message("T", b"after the cut"))
    agrees()
    storage.close()


def _topic_delete(topic: str) -> Message:
    return Message(METADATA_TOPIC, b"{}", queue_id=0,
                   properties={PROPERTY_OP: OP_TOPIC_DELETE, PROPERTY_SUBJECT_TOPIC: topic})


def test_a_topic_delete_restarts_the_topics_queue_offsets_on_every_member(
        tmp_path: Path) -> None:
    """A topic delete's record drops the topic's queue offsets: on the leader for what it
    encodes after the delete in the same round (staged) and after the append, on a follower
    that appends the same entries, and in the recount after a truncation of entries past the
    delete; another topic keeps its offsets."""
    leader, leader_log = open_storage(tmp_path / "leader", default_queue_count=1)
    follower, follower_log = open_storage(tmp_path / "follower", default_queue_count=1)
    entries = [leader_append(leader_log, 1, None)]
    for number in range(3):
        entries.append(leader_append(leader_log, 1, Message("D", body(number, 10))))
    entries.append(leader_append(leader_log, 1, Message("Other", b"o")))
    leader_log.start_encoding()
    staged = [leader_log.encode(message) for message in
              (Message("D", b"last-old"), _topic_delete("D"), Message("D", b"new"),
               Message("Other", b"o2"))]
    assert [_place(encoded)[0] for encoded in staged] == [3, 0, 0, 1]
    for encoded in staged:
        assert isinstance(encoded, bytes)
        entries.append(Entry(leader_log.last_index + 1, 1, encoded))
        leader_log.append(entries[-1])
    for entry in entries:
        follower_log.append(entry)
    for log in (leader_log, follower_log):
        assert _place(log.encode(Message("D", b"next")))[0] == 1
        assert _place(log.encode(Message("Other", b"next")))[0] == 2
    follower.set_committed(5)  # through the "Other" message: the delete is past the commit
    follower_log.truncate_from(len(entries))  # the recount reads the delete from the log
    assert _place(follower_log.encode(Message("D", b"again")))[0] == 1
    follower_log.truncate_from(7)  # the delete itself goes: the old incarnation goes on
    assert _place(follower_log.encode(Message("D", b"again")))[0] == 4
    leader.close()
    follower.close()
