"""Reads answered with the records' encoded forms, kept by commit-log offset
(store/encoded_reads.py): the same records as a read of the log, cold or cached, across file
boundaries and byte bounds, after retention and after a slave's log is cut back; a cached
read decodes nothing; the cache holds at most its bytes; a cold read stops at `misses_max`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from store import BrokerRole, GetMessageStatus, Message, MessageStore, StoredMessage
from store.encoded_reads import ENTRY_OVERHEAD_BYTES, EncodedRecords
from store.status import AppendRawStatus
from tests.support.store import fill_across_files, remove_oldest_log_files, wait_dispatched

OpenStore = Callable[..., MessageStore]
READ_ALL = 1024


class CountingEncoder:
    """Encodes a record as its queue offset and body; counts the records it encoded."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: list[StoredMessage]) -> list[bytes]:
        self.calls += len(messages)
        return [b"%d:" % message.queue_offset + message.body for message in messages]


def _expected(store: MessageStore, offset: int, count: int,
              max_bytes: int) -> tuple[GetMessageStatus, int, list[bytes]]:
    result = store.get_messages("T", 0, offset, count, max_bytes)
    return result.status, result.next_offset, [b"%d:" % m.queue_offset + m.body
                                               for m in result.messages]


def _check_reads(store: MessageStore, encoder: CountingEncoder) -> int:
    """Every read, cold then cached, answers as get_messages; the cached one decodes
    nothing. Returns how many reads were checked."""
    queue = store.queues.get("T", 0)
    assert queue is not None
    checked = 0
    for offset in range(queue.min_queue_offset, queue.max_queue_offset, 7):
        for count in (1, 5, 16, 17, 40, 200):
            for max_bytes in (1, 4000, 1 << 24):
                expected = _expected(store, offset, count, max_bytes)
                store.encoded_records.clear(store.commit_log.generation)
                for cached in (False, True):
                    calls = encoder.calls
                    read = store.get_encoded("T", 0, offset, count, encoder, READ_ALL,
                                             max_bytes)
                    assert (read.status, read.next_offset,
                            [record.data for record in read.records]) == expected, \
                        (offset, count, max_bytes, cached)
                    if cached:
                        assert encoder.calls == calls
                checked += 1
    return checked


def test_encoded_reads_answer_as_reads_of_the_log(open_store: OpenStore) -> None:
    store = open_store(consume_queue_entries_per_file=16)
    fill_across_files(store)
    encoder = CountingEncoder()
    assert _check_reads(store, encoder) > 100
    # Cached, then retention removes the oldest log files (their entries stay until the
    # queue's files go): the cache answers none of the records the log no longer holds.
    store.get_encoded("T", 0, 0, READ_ALL, encoder, READ_ALL)
    remove_oldest_log_files(store)
    queue = store.queues.get("T", 0)
    assert queue is not None
    read = store.get_encoded("T", 0, queue.min_queue_offset, READ_ALL, encoder, READ_ALL)
    assert [record.data for record in read.records] == _expected(
        store, queue.min_queue_offset, READ_ALL, 1 << 24)[2]
    assert _check_reads(store, encoder) > 0


def test_a_read_after_a_cut_answers_the_records_written_since(open_store: OpenStore,
                                                              tmp_path: Path) -> None:
    """A slave read (and cached) the old master's records, was cut back to where it
    agrees with its new master, and received the new master's records at the same
    offsets: it answers the new ones."""
    old = open_store(data_dir=tmp_path / "old", broker_role=BrokerRole.ASYNC_MASTER)
    new = open_store(data_dir=tmp_path / "new", broker_role=BrokerRole.ASYNC_MASTER)
    slave = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    for index in range(4):
        for master in (old, new):
            master.put_message(Message("T", b"shared %d" % index, queue_id=0))
    agreed = old.max_offset
    for index in range(4):
        old.put_message(Message("T", b"old only %d" % index, queue_id=0))
        new.put_message(Message("T", b"new only %d" % index, queue_id=0))
    assert new.max_offset == old.max_offset
    assert slave.append_raw(0, old.commit_log.read_bytes(0, old.max_offset)) is \
        AppendRawStatus.OK
    wait_dispatched(slave)
    encoder = CountingEncoder()
    before = slave.get_encoded("T", 0, 0, READ_ALL, encoder, READ_ALL)
    assert [record.data for record in before.records][4:] == [
        b"%d:old only %d" % (4 + index, index) for index in range(4)]
    slave.truncate_log(agreed)
    assert slave.append_raw(agreed, new.commit_log.read_bytes(agreed, new.max_offset)) is \
        AppendRawStatus.OK
    wait_dispatched(slave)
    after = slave.get_encoded("T", 0, 0, READ_ALL, encoder, READ_ALL)
    assert [record.data for record in after.records] == [
        *(b"%d:shared %d" % (index, index) for index in range(4)),
        *(b"%d:new only %d" % (4 + index, index) for index in range(4))]


def test_the_cache_holds_at_most_its_bytes_the_oldest_leaving_first(
        open_store: OpenStore) -> None:
    store = open_store()
    for index in range(20):
        store.put_message(Message("T", b"%02d" % index + b"x" * 98, queue_id=0))
    wait_dispatched(store)
    record_bytes = 103 + ENTRY_OVERHEAD_BYTES  # "NN:" and the 100-byte body, and overhead
    cache = EncodedRecords(store.commit_log, bytes_max=5 * record_bytes)
    encoder = CountingEncoder()
    read = cache.read(store.queues, "T", 0, 0, 20, encoder, misses_max=20)
    assert len(read.records) == 20 and encoder.calls == 20
    assert cache.size_bytes == 5 * record_bytes
    cache.read(store.queues, "T", 0, 15, 5, encoder, misses_max=20)
    assert encoder.calls == 20  # the last five filled are kept
    cache.read(store.queues, "T", 0, 14, 1, encoder, misses_max=20)
    assert encoder.calls == 21  # 14 had gone
    cache.read(store.queues, "T", 0, 16, 4, encoder, misses_max=20)
    assert encoder.calls == 21  # 16 to 19 are still kept
    cache.read(store.queues, "T", 0, 15, 1, encoder, misses_max=20)
    assert encoder.calls == 22  # 15, the oldest, went when 14 came in
    assert cache.size_bytes == 5 * record_bytes
    assert EncodedRecords(store.commit_log, bytes_max=0).read(
        store.queues, "T", 0, 0, 3, encoder, misses_max=20).next_offset == 3


def test_a_cold_read_stops_after_misses_max_decodes(open_store: OpenStore) -> None:
    store = open_store()
    for index in range(30):
        store.put_message(Message("T", b"m%d" % index, queue_id=0))
    wait_dispatched(store)
    encoder = CountingEncoder()
    store.get_encoded("T", 0, 4, 2, encoder, 8)  # 4 and 5 cached
    read = store.get_encoded("T", 0, 0, 30, encoder, 8)
    assert read.status is GetMessageStatus.FOUND
    assert [record.data for record in read.records] == [b"%d:m%d" % (i, i) for i in range(10)]
    assert read.next_offset == 10 and encoder.calls == 2 + 8


def test_hits_and_decodes_are_counted(open_store: OpenStore) -> None:
    """A cold read counts its records as decoded, the same read again as hits; the kept
    bytes are what the cache holds."""
    store = open_store()
    for index in range(10):
        store.put_message(Message("T", b"m%d" % index, queue_id=0))
    wait_dispatched(store)
    cache, encoder = store.encoded_records, CountingEncoder()
    store.get_encoded("T", 0, 0, 6, encoder, READ_ALL)
    assert (cache.decoded_count, cache.hit_count) == (6, 0)
    store.get_encoded("T", 0, 0, 10, encoder, READ_ALL)  # 6 kept, 4 more decoded
    assert (cache.decoded_count, cache.hit_count) == (10, 6)
    store.get_encoded("T", 0, 0, 10, encoder, READ_ALL)
    assert (cache.decoded_count, cache.hit_count) == (10, 16)
    assert cache.size_bytes > 10 * ENTRY_OVERHEAD_BYTES

