"""Reads with a tag filter (store/tag_reads.py): the consume queue's tags code first, so an
entry of another tag is passed without reading its record; two tags of one code are both read
(the caller confirms the tag). The commit log's record reads are counted through a seam (its
`read_records`, wrapped)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from store import Message, MessageStore
from store.record import tags_code
from store.tag_reads import get_tagged_messages
from tests.support.store import wait_dispatched

OpenStore = Callable[..., MessageStore]


def _counting_reads(store: MessageStore) -> list[int]:
    """The commit-log offsets every record read asks for, from now on."""
    asked: list[int] = []
    read_records = store.commit_log.read_records

    def counted(offsets: list[int]) -> Any:
        asked.extend(offsets)
        return read_records(offsets)

    store.commit_log.read_records = counted  # type: ignore[method-assign]
    return asked


def _put(store: MessageStore, tags: list[str | None]) -> None:
    for number, tag in enumerate(tags):
        properties = {} if tag is None else {"TAGS": tag}
        store.put_message(Message("T", f"m{number}".encode(), properties, queue_id=0))
    wait_dispatched(store)


def test_entries_of_other_tags_are_passed_without_reading_a_record(
        open_store: OpenStore) -> None:
    store = open_store(consume_queue_entries_per_file=16)
    _put(store, ["B", None, "C"] * 20)  # 60 entries over four queue files, none of tag A
    asked = _counting_reads(store)
    result = get_tagged_messages(store, "T", 0, 0, 50, frozenset({"A"}))
    assert asked == []
    assert (result.messages, result.passed, result.next_offset) == ([], list(range(50)), 50)
    rest = get_tagged_messages(store, "T", 0, 50, 50, frozenset({"A"}))
    assert (rest.passed, rest.next_offset, asked) == (list(range(50, 60)), 60, [])


def test_only_the_wanted_tags_records_are_read(open_store: OpenStore) -> None:
    store = open_store(consume_queue_entries_per_file=16)
    _put(store, ["A", "B", None, "C"] * 10)
    asked = _counting_reads(store)
    result = get_tagged_messages(store, "T", 0, 0, 40, frozenset({"A", "C"}))
    assert [message.tags for message in result.messages] == ["A", "C"] * 10
    assert len(asked) == 20  # one record read each, none for B or untagged
    assert result.passed == [offset for offset in range(40) if offset % 4 in (1, 2)]
    assert result.next_offset == 40
    plain = store.get_messages("T", 0, 0, 40)
    assert [m.body for m in result.messages] == [m.body for m in plain.messages
                                                 if m.tags in ("A", "C")]


def test_a_tag_sharing_the_wanted_tags_code_is_read_for_the_caller_to_confirm(
        open_store: OpenStore) -> None:
    assert tags_code("Aa") == tags_code("BB")  # Java's String.hashCode collides
    store = open_store()
    _put(store, ["BB", "Aa", "Zz"])
    asked = _counting_reads(store)
    result = get_tagged_messages(store, "T", 0, 0, 10, frozenset({"Aa"}))
    assert [message.tags for message in result.messages] == ["BB", "Aa"]
    assert (len(asked), result.passed) == (2, [2])
