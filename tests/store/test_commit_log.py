from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from store import (
    AppendRawStatus,
    BrokerRole,
    Message,
    MessageStore,
    PutMessageStatus,
    StoreCorruptError,
)
from store.commit_log import CommitLog
from store.errors import OffsetNotAvailableError
from store.files.mapped_file import MappedFile
from tests.support.store import SMALL_FILE_BYTES, small_config, wait_dispatched

OpenStore = Callable[..., MessageStore]


def _fill(store: MessageStore, count: int, size: int = 1000, topic: str = "T") -> list[int]:
    offsets = []
    for index in range(count):
        body = index.to_bytes(4, "big") * (size // 4)
        result, done = store.put_message(Message(topic, body, {"KEYS": f"k{index}"}))
        assert result.status is PutMessageStatus.PUT_OK, result
        assert done.result(5) is PutMessageStatus.PUT_OK
        offsets.append(result.commit_log_offset)
    return offsets


def test_appends_roll_across_files(open_store: OpenStore, tmp_path: Path) -> None:
    """Records never span files: a full file ends with a blank and the next file follows."""
    store = open_store()
    offsets = _fill(store, 300)
    files = sorted((tmp_path / "commitlog").iterdir())
    assert len(files) >= 4
    assert [int(f.name) for f in files] == [i * SMALL_FILE_BYTES for i in range(len(files))]
    for index, offset in enumerate(offsets):
        record = store.commit_log.read_record(offset)
        assert record.body[:4] == index.to_bytes(4, "big")
        assert offset // SMALL_FILE_BYTES == (offset + record.total_size - 1) // SMALL_FILE_BYTES


def test_batch_append_assigns_consecutive_offsets(open_store: OpenStore) -> None:
    """A batch is written under one lock: queue offsets are consecutive per queue."""
    store = open_store()
    pairs = store.put_messages([Message("B", b"m%d" % i, queue_id=1) for i in range(50)])
    assert [r.queue_offset for r, _ in pairs] == list(range(50))
    assert all(done.result(5) is PutMessageStatus.PUT_OK for _, done in pairs)


def test_batch_reports_each_entry(open_store: OpenStore) -> None:
    """A bad entry in a batch is refused alone; the others are stored."""
    store = open_store()
    results = [r for r, _ in store.put_messages(
        [Message("B", b"ok"), Message("bad topic", b"x"), Message("B", b"ok", queue_id=99)])]
    assert [r.status for r in results] == [
        PutMessageStatus.PUT_OK, PutMessageStatus.MESSAGE_ILLEGAL,
        PutMessageStatus.MESSAGE_ILLEGAL]
    assert "queue_id" in results[2].detail


def test_read_bytes_and_sendfile(open_store: OpenStore) -> None:
    """Raw ranges come from one file, and os.sendfile sends the same bytes."""
    store = open_store()
    _fill(store, 100)
    start = SMALL_FILE_BYTES - 5000
    raw = store.commit_log.read_bytes(start, start + 20_000)
    assert len(raw) == 5000  # cut at the file's end
    source = store.commit_log.transfer_source(start, 32 * 1024)
    assert source is not None and source.size_bytes == 5000
    left, right = socket.socketpair()
    with source, left, right:
        sent = os.sendfile(left.fileno(), source.fd, source.file_position, source.size_bytes)
        received = b""
        while len(received) < sent:
            received += right.recv(65536)
    assert received == raw


def test_append_raw_at_expected_offset_only(tmp_path: Path, open_store: OpenStore) -> None:
    """A slave's raw append must start at its max offset; a wrong offset writes nothing."""
    master = open_store(data_dir=tmp_path / "master")
    _fill(master, 150)
    slave = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    offset = 0
    while offset < master.max_offset:
        chunk = master.commit_log.read_bytes(offset, offset + 7777)  # cuts mid-record
        assert slave.append_raw(offset + 1, chunk) is AppendRawStatus.OFFSET_MISMATCH
        assert slave.append_raw(offset, chunk) is AppendRawStatus.OK
        offset += len(chunk)
    assert slave.max_offset == master.max_offset
    for index in range(master.max_offset // SMALL_FILE_BYTES + 1):
        start = index * SMALL_FILE_BYTES
        assert slave.commit_log.read_bytes(start, start + SMALL_FILE_BYTES) == (
            master.commit_log.read_bytes(start, start + SMALL_FILE_BYTES))
    slave.dispatch.dispatch_available()
    wait_dispatched(master)  # the master's queues are built by its dispatch thread
    for queue_id in range(4):
        ours = slave.get_messages("T", queue_id, 0, 1000)
        theirs = master.get_messages("T", queue_id, 0, 1000)
        assert [m.body for m in ours.messages] == [m.body for m in theirs.messages]
        assert len(ours.messages) > 0


def test_append_raw_refuses_spanning_files(tmp_path: Path, open_store: OpenStore) -> None:
    """Replicated bytes never span two files."""
    slave = open_store(broker_role=BrokerRole.SLAVE)
    status = slave.append_raw(0, bytes(SMALL_FILE_BYTES + 1))
    assert status is AppendRawStatus.SPANS_FILES
    assert slave.max_offset == 0


def test_slave_refuses_puts(open_store: OpenStore) -> None:
    """A SLAVE answers SERVICE_NOT_AVAILABLE and stores nothing."""
    slave = open_store(broker_role=BrokerRole.SLAVE)
    result, done = slave.put_message(Message("T", b"x"))
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert done.result() is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert slave.max_offset == 0


def test_truncate_drops_later_records(open_store: OpenStore) -> None:
    """After truncate(offset) the log ends there and the next append lands there."""
    store = open_store()
    offsets = _fill(store, 200)
    store.commit_log.truncate(offsets[120])
    assert store.max_offset == offsets[120]
    with pytest.raises(OffsetNotAvailableError):
        store.commit_log.read_record(offsets[150])
    result, _ = store.put_message(Message("T", b"again"))
    assert result.commit_log_offset == offsets[120]


def test_missing_middle_file_stops_start(tmp_path: Path, open_store: OpenStore) -> None:
    """A hole in the file set names the missing file instead of serving wrong data."""
    store = open_store()
    _fill(store, 300)
    store.shutdown()
    middle = sorted((tmp_path / "commitlog").iterdir())[1]
    middle.unlink()
    with pytest.raises(StoreCorruptError, match=middle.name):
        MessageStore(small_config(tmp_path)).start()


def test_wrong_size_file_stops_start(tmp_path: Path, open_store: OpenStore) -> None:
    """A middle file of the wrong size names that file."""
    store = open_store()
    _fill(store, 300)
    store.shutdown()
    middle = sorted((tmp_path / "commitlog").iterdir())[1]
    os.truncate(middle, SMALL_FILE_BYTES // 2)
    with pytest.raises(StoreCorruptError, match=f"{middle.name}.*size"):
        MessageStore(small_config(tmp_path)).start()


def test_foreign_file_stops_start(tmp_path: Path, open_store: OpenStore) -> None:
    """A file that is not named by an offset is named in the error."""
    open_store().shutdown()
    (tmp_path / "commitlog" / "notes.txt").write_text("hi")
    with pytest.raises(StoreCorruptError, match="notes.txt"):
        MessageStore(small_config(tmp_path)).start()


def test_second_store_on_same_dir_is_refused(tmp_path: Path, open_store: OpenStore) -> None:
    """Two stores never write one data dir."""
    open_store()
    with pytest.raises(Exception, match="in use"):
        MessageStore(small_config(tmp_path)).start()


def test_promoted_slave_continues_each_queue(tmp_path: Path, open_store: OpenStore) -> None:
    """A slave turned master numbers its next message after the replicated ones in each queue
    (a slave's raw appends assign no queue offsets), so the new message is readable there."""
    master = open_store(data_dir=tmp_path / "master")
    _fill(master, 20)
    wait_dispatched(master)
    slave = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    assert slave.append_raw(0, master.commit_log.read_bytes(0, master.max_offset)) is (
        AppendRawStatus.OK)
    slave.change_role(BrokerRole.ASYNC_MASTER)
    for queue_id in range(4):
        replicated = master.queue_offset_range("T", queue_id)
        assert replicated is not None and replicated[1] > 0
        result, done = slave.put_message(Message("T", b"after promotion", queue_id=queue_id))
        assert done.result(5) is PutMessageStatus.PUT_OK
        assert result.queue_offset == replicated[1]
        wait_dispatched(slave)
        read = slave.get_messages("T", queue_id, replicated[1], 10)
        assert [message.body for message in read.messages] == [b"after promotion"]


def test_promoted_slave_cuts_a_record_its_master_did_not_finish_sending(
        tmp_path: Path, open_store: OpenStore) -> None:
    """A slave whose master died mid-record (frames are cut at any byte) holds a torn tail;
    promoted, it cuts it before its first put, so the new record follows the last whole one
    and every record of its log reads back (found by the classic-replication simulation)."""
    master = open_store(data_dir=tmp_path / "master")
    _fill(master, 5)
    whole_end = master.max_offset
    _fill(master, 1)
    wait_dispatched(master)
    slave = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    torn_end = whole_end + (master.max_offset - whole_end) // 2
    assert slave.append_raw(0, master.commit_log.read_bytes(0, torn_end)) is AppendRawStatus.OK
    slave.change_role(BrokerRole.ASYNC_MASTER)
    assert slave.max_offset == whole_end
    result, done = slave.put_message(Message("T", b"after promotion", queue_id=0))
    assert done.result(5) is PutMessageStatus.PUT_OK and result.commit_log_offset == whole_end
    assert slave.commit_log.read_record(whole_end).body == b"after promotion"
    wait_dispatched(slave)
    read = slave.get_messages("T", 0, result.queue_offset, 10)
    assert [message.body for message in read.messages] == [b"after promotion"]


def test_promoted_slave_cuts_an_end_of_file_blank_it_did_not_receive_whole(
        tmp_path: Path, open_store: OpenStore) -> None:
    """A slave that received only part of a file's end blank waits for the rest before it
    dispatches past it; promoted, it cuts the part, so its first put is not written inside
    a blank (where every reader would skip it) but readable where the blank began."""
    master = open_store(data_dir=tmp_path / "master")
    offsets = _fill(master, 2 * SMALL_FILE_BYTES // 1000)
    wait_dispatched(master)
    in_first_file = [o for o in offsets if o < SMALL_FILE_BYTES]
    last = master.commit_log.read_record(in_first_file[-1])
    blank_start = last.commit_log_offset + last.total_size
    assert SMALL_FILE_BYTES - blank_start > 16  # a blank of more than its 8-byte header
    slave = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    assert slave.append_raw(0, master.commit_log.read_bytes(0, blank_start + 12)) is (
        AppendRawStatus.OK)
    slave.change_role(BrokerRole.ASYNC_MASTER)
    assert slave.max_offset == blank_start
    result, done = slave.put_message(Message("T", b"after promotion", queue_id=0))
    assert done.result(5) is PutMessageStatus.PUT_OK
    wait_dispatched(slave)
    read = slave.get_messages("T", 0, result.queue_offset, 10)
    assert [message.body for message in read.messages] == [b"after promotion"]


def test_entry_writes_follow_the_position_rule_and_clear_a_failed_creation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write_entry_record takes a record at the log's end while it fits with the blank, else
    only at the next file's start; after a failed file creation the next write that works
    (here one that fits the last file once the log was cut back) clears create_file_error."""
    log = CommitLog(small_config(tmp_path), on_append=lambda: None)
    log.load()
    record = b"r" * (SMALL_FILE_BYTES // 4)
    for number in range(3):
        assert log.write_entry_record(number * len(record), record) is AppendRawStatus.OK
    end = 3 * len(record)
    assert log.write_entry_record(end + 1, b"s" * 100) is AppendRawStatus.OFFSET_MISMATCH
    assert log.write_entry_record(end, record) is AppendRawStatus.OFFSET_MISMATCH  # no room

    def refuse(start_if_empty: int = 0) -> MappedFile:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(log.files, "writable_file", refuse)
    assert log.write_entry_record(SMALL_FILE_BYTES, record) \
        is AppendRawStatus.CREATE_MAPPED_FILE_FAILED
    assert log.create_file_error is not None
    monkeypatch.undo()
    log.truncate(end)  # the blank the failed write left before its file goes
    assert log.write_entry_record(end, b"s" * 100) is AppendRawStatus.OK
    assert log.create_file_error is None
    assert log.read_bytes(end, end + 100) == b"s" * 100
    log.close()
