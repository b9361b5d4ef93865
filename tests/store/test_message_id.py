"""Finding a record by its message id: the id's offset and host are checked on the record."""

from __future__ import annotations

from collections.abc import Callable

from store import Message, MessageStore
from store.message_id import LookupStatus, parse_msg_id


def test_an_id_finds_its_message(open_store: Callable[..., MessageStore]) -> None:
    """The msg_id of each stored message reads back that message."""
    store = open_store()
    results = [store.put_message(Message("Ids", f"m{i}".encode(), queue_id=i % 2))[0]
               for i in range(5)]
    for index, result in enumerate(results):
        found = store.get_message_by_id(result.msg_id)
        assert found.status is LookupStatus.FOUND and found.message is not None
        assert found.message.body == f"m{index}".encode()
        assert found.message.msg_id == result.msg_id


def test_offsets_that_start_no_record_are_not_found(
        open_store: Callable[..., MessageStore]) -> None:
    """An id whose offset is inside a record, at or past the log's end, answers NOT_FOUND."""
    store = open_store()
    result, _ = store.put_message(Message("Ids", b"x" * 100))
    parsed = parse_msg_id(result.msg_id)
    assert parsed is not None
    host = parsed.store_host.hex().upper()
    for offset in (result.commit_log_offset + 1, store.max_offset, store.max_offset + 4096,
                   2**62):
        missing = store.get_message_by_id(host + f"{offset:016X}")
        assert missing.status is LookupStatus.NOT_FOUND, offset


def test_an_id_of_another_host_is_not_found(open_store: Callable[..., MessageStore]) -> None:
    """The right offset under another host's STOREHOST is not this broker's message."""
    store = open_store()
    result, _ = store.put_message(Message("Ids", b"mine"))
    other_host = "0A000001" + "00002A9F"  # 10.0.0.1:10911
    other = store.get_message_by_id(other_host + result.msg_id[16:])
    assert other.status is LookupStatus.NOT_FOUND


def test_malformed_ids(open_store: Callable[..., MessageStore]) -> None:
    """Ids of the wrong length, with non-hex digits or a negative offset are MALFORMED_ID."""
    store = open_store()
    for text in ("", "ABC", "G" * 32, "7F000001" + "00002A9F" + "FFFFFFFFFFFFFFFF",
                 "7F000001" + "00002A9F" + "0" * 17):
        assert store.get_message_by_id(text).status is LookupStatus.MALFORMED_ID, text
