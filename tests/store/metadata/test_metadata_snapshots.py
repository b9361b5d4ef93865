"""Metadata snapshots (store/metadata/log_records.py): a snapshot's parts round-trip through
their records and hold every row once, within their bound; and the tables applied from a log
suffix that starts at a snapshot equal the tables applied from the whole log, with or
without the snapshot in it (the snapshot applies as nothing where the tables already hold
it)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.dispatch import SystemRecord
from store.metadata import MetadataStore
from store.metadata.log_records import (
    GroupPut,
    MetadataChange,
    MetadataRecordError,
    MetadataSnapshot,
    OffsetSet,
    QueueStart,
    SnapshotTooLarge,
    TopicPut,
    decode,
    encode,
    op_of,
    snapshot_parts,
)
from store.system_topics import OP_SNAPSHOT, queue_starts, snapshot_part
from tests.store.metadata.test_log_records import _CHANGES, _SETTINGS, _tables
from tests.support.metadata import fresh_database_url

_NAMES = st.text("abcdefghij-_%", min_size=1, max_size=40)
_TIMES = st.integers(min_value=1, max_value=2**40)
_TOPIC_ROWS = st.lists(st.builds(TopicPut, name=_NAMES, read_queue_count=st.integers(1, 8),
                                 write_queue_count=st.integers(1, 8),
                                 permission=st.sampled_from([2, 4, 6]), created_at_ms=_TIMES,
                                 updated_at_ms=_TIMES), max_size=30)
_GROUP_ROWS = st.lists(st.builds(GroupPut, name=_NAMES, consume_enabled=st.booleans(),
                                 broadcast_enabled=st.booleans(),
                                 retry_queue_count=st.integers(0, 4),
                                 retry_times_max=st.integers(0, 16), created_at_ms=_TIMES,
                                 updated_at_ms=_TIMES), max_size=30)
_OFFSET_ROWS = st.lists(st.builds(OffsetSet, group_name=_NAMES, topic=_NAMES,
                                  queue_id=st.integers(0, 7), queue_offset=st.integers(0, 10**9),
                                  reset=st.just(True), at_ms=_TIMES), max_size=60)
_QUEUE_ROWS = st.lists(st.builds(QueueStart, topic=_NAMES, queue_id=st.integers(0, 7),
                                 queue_offset=st.integers(0, 10**12)), max_size=60)


@given(topics=_TOPIC_ROWS, groups=_GROUP_ROWS, offsets=_OFFSET_ROWS, queues=_QUEUE_ROWS,
       part_bytes_max=st.integers(1, 4000))
def test_a_snapshots_parts_round_trip_and_hold_every_row_once(
        topics: list[TopicPut], groups: list[GroupPut], offsets: list[OffsetSet],
        queues: list[QueueStart], part_bytes_max: int) -> None:
    parts = snapshot_parts(topics, groups, offsets, queues, part_bytes_max)
    assert [(part.part, part.parts) for part in parts] == [
        (index, len(parts)) for index in range(len(parts))]
    for part in parts:
        body = encode(part)
        assert op_of(part) == OP_SNAPSHOT
        assert decode(OP_SNAPSHOT, body) == part
        # What the store reads of it without the metadata layer.
        assert snapshot_part(OP_SNAPSHOT, body) == (part.part, part.parts)
        assert queue_starts(OP_SNAPSHOT, body) == [
            (queue.topic, queue.queue_id, queue.queue_offset) for queue in part.queues]
        items = len(part.topics) + len(part.groups) + len(part.offsets) + len(part.queues)
        # Bounded: a part holds one item past the bound at most (an item is never split).
        assert items <= 1 or len(body) <= part_bytes_max + 1000
    assert [t for part in parts for t in part.topics] == topics
    assert [g for part in parts for g in part.groups] == groups
    assert [o for part in parts for o in part.offsets] == offsets
    assert [q for part in parts for q in part.queues] == queues


def test_a_snapshot_past_its_part_bound_is_refused() -> None:
    topics = [TopicPut(f"t{n}", 1, 1, 6, 1, 1) for n in range(5000)]
    with pytest.raises(SnapshotTooLarge):
        snapshot_parts(topics, [], [], [], part_bytes_max=1)


@pytest.mark.parametrize("body", [
    b'{"v": 1, "op": "snapshot", "part": 1, "parts": 1, "topics": [], "groups": [], '
    b'"offsets": [], "queues": []}',
    b'{"v": 1, "op": "snapshot", "part": 0, "parts": 1, "topics": [], "groups": [], '
    b'"offsets": []}',
    b'{"v": 1, "op": "snapshot", "part": 0, "parts": 1, "topics": {}, "groups": [], '
    b'"offsets": [], "queues": []}',
    b'{"v": 1, "op": "snapshot", "part": 0, "parts": 1, "topics": [], "groups": [], '
    b'"offsets": [], "queues": [{"topic": "A", "queue_id": "0", "queue_offset": 1}]}',
    b'{"v": 1, "op": "snapshot", "part": true, "parts": 2, "topics": [], "groups": [], '
    b'"offsets": [], "queues": []}',
])
def test_a_bad_snapshot_record_is_refused(body: bytes) -> None:
    with pytest.raises(MetadataRecordError):
        decode(OP_SNAPSHOT, body)


_counter = itertools.count()


def _records(changes: list[MetadataChange], first_queue_offset: int = 0) -> list[SystemRecord]:
    return [SystemRecord(1000 * number, number, op_of(change), encode(change))
            for number, change in enumerate(changes, start=first_queue_offset)]


@_SETTINGS
@given(changes=st.lists(_CHANGES, max_size=25), snapshot_at=st.integers(0, 25),
       part_bytes_max=st.sampled_from([1, 150, 100_000]))
def test_the_tables_from_a_snapshot_on_equal_the_tables_of_the_whole_log(
        migrated_template: Path, tmp_path: Path, changes: list[MetadataChange],
        snapshot_at: int, part_bytes_max: int) -> None:
    """A leader applies a prefix of the log, writes its snapshot (in parts) and applies the
    rest. A replica that holds only the log from the snapshot on (retention took the rest)
    ends with the leader's tables, and so does one that applies the whole log without the
    snapshot."""
    directory = tmp_path / str(next(_counter))
    stores = []
    for name in ("leader", "suffix", "whole"):
        (directory / name).mkdir(parents=True)
        stores.append(MetadataStore(fresh_database_url(migrated_template, directory / name)))
    leader, suffix, whole = stores
    try:
        cut = min(snapshot_at, len(changes))
        prefix = _records(changes[:cut])
        for record in prefix:
            leader.apply_record(record)
        applied, (topics, groups, offsets) = leader.snapshot_tables()
        assert applied == cut
        parts: list[MetadataChange] = list(snapshot_parts(topics, groups, offsets, [],
                                                          part_bytes_max))
        rest = _records([*parts, *changes[cut:]], first_queue_offset=cut)
        for record in rest:
            leader.apply_record(record)
        for record in rest:
            suffix.apply_record(record)
        for record in _records(changes):
            whole.apply_record(record)
        assert _tables(suffix) == _tables(leader)
        assert _tables(whole) == _tables(leader)
        assert suffix.log_position.queue_offset == leader.log_position.queue_offset
    finally:
        for store in stores:
            store.stop()


def test_a_snapshot_after_a_gap_replaces_what_the_tables_held(migrated_template: Path,
                                                               tmp_path: Path) -> None:
    """Tables that did not apply the records before a snapshot (a rebuild that starts at it,
    its position below) and hold rows it does not end with exactly its rows, offsets
    included, durable with the position past it."""
    url = fresh_database_url(migrated_template, tmp_path)
    metadata = MetadataStore(url)
    try:
        for change in (TopicPut("old", 1, 1, 6, 1, 1), GroupPut("g0", True, False, 1, 16, 1, 1),
                       OffsetSet("g0", "old", 0, 9, False, 2)):
            metadata.apply_change(change)
        snapshot = MetadataSnapshot(0, 1, (TopicPut("A", 4, 4, 6, 5, 5),),
                                    (GroupPut("g1", True, False, 1, 16, 5, 5),),
                                    (OffsetSet("g1", "A", 2, 7, True, 6),), ())
        metadata.apply_record(SystemRecord(500, 5, OP_SNAPSHOT, encode(snapshot)))
        assert [t.name for t in metadata.list_topics()] == ["A"]
        assert [g.name for g in metadata.list_groups()] == ["g1"]
        assert [(o.group_name, o.topic, o.queue_id, o.queue_offset)
                for o in metadata.list_consumer_offsets()] == [("g1", "A", 2, 7)]
        durable = MetadataStore(url)  # what a crash now leaves: the part is durable
        try:
            assert durable.list_topics() == metadata.list_topics()
            assert durable.list_consumer_offsets() == metadata.list_consumer_offsets()
            assert durable.log_position.queue_offset == 6
        finally:
            durable.stop()
    finally:
        metadata.stop()


def test_tables_that_applied_the_records_before_a_snapshot_pass_it_over(
        migrated_template: Path, tmp_path: Path) -> None:
    """Where the tables applied every record before it, a snapshot is what they hold (it is
    exact), so its parts change nothing: a live broker never shows half its tables while the
    parts go by. (A snapshot that disagreed would show: this one names nothing.)"""
    metadata = MetadataStore(fresh_database_url(migrated_template, tmp_path))
    try:
        records = _records([TopicPut("A", 4, 4, 6, 1, 1), OffsetSet("g", "A", 0, 3, False, 2),
                            *snapshot_parts([], [], [], [], part_bytes_max=1)])
        for record in records:
            metadata.apply_record(record)
        assert [t.name for t in metadata.list_topics()] == ["A"]
        assert metadata.get_consumer_offset(group_name="g", topic="A", queue_id=0) == 3
        assert metadata.log_position.queue_offset == len(records)
    finally:
        metadata.stop()


def test_a_crash_while_a_snapshot_loads_leaves_the_position_before_it(
        migrated_template: Path, tmp_path: Path) -> None:
    """The parts of a snapshot being loaded persist the position only with the last: a
    crash between them leaves the tables' position where the load began (reset: 0), so the
    next start rebuilds them again."""
    url = fresh_database_url(migrated_template, tmp_path)
    metadata = MetadataStore(url)
    parts = snapshot_parts([TopicPut(f"t{n}", 1, 1, 6, 1, 1) for n in range(20)], [], [], [],
                           part_bytes_max=200)
    assert len(parts) >= 3
    records = _records(list(parts), first_queue_offset=7)
    metadata.apply_record(records[0])
    metadata.apply_record(records[1])
    metadata.flush_consumer_offsets()  # the periodic flush, mid-load
    assert _persisted_position(url) == 0
    for record in records[2:]:
        metadata.apply_record(record)
    assert metadata.log_position.queue_offset == 7 + len(parts)
    assert len(metadata.list_topics()) == 20
    metadata.flush_consumer_offsets()
    assert _persisted_position(url) == 7 + len(parts)
    metadata.stop()


def _persisted_position(url: str) -> int:
    """The position a crash now would leave: what another store on the database reads."""
    durable = MetadataStore(url)
    try:
        return durable.log_position.queue_offset
    finally:
        durable.stop()


def test_tables_that_begin_past_a_gap_load_the_next_snapshot(migrated_template: Path,
                                                             tmp_path: Path) -> None:
    """A replica whose log begins at its master's min offset gets records past a gap (the
    ones below went with retention): its tables lack what those held, so the next snapshot
    is loaded even though it follows the records before it; until then the position is not
    persisted, so a restart rebuilds."""
    url = fresh_database_url(migrated_template, tmp_path)
    metadata = MetadataStore(url)
    try:
        log = _records([TopicPut("A", 4, 4, 6, 1, 1), OffsetSet("g", "A", 0, 9, False, 2),
                        TopicPut("B", 4, 4, 6, 3, 3), OffsetSet("g", "A", 0, 10, False, 4)])
        leader = MetadataStore("sqlite://")
        for record in log:
            leader.apply_record(record)
        applied, (topics, groups, offsets) = leader.snapshot_tables()
        leader.stop()
        parts = _records(snapshot_parts(topics, groups, offsets, []), first_queue_offset=4)
        metadata.apply_record(log[3])  # the first record this replica's log holds
        metadata.flush_consumer_offsets()
        assert _persisted_position(url) == 0  # lacking: not persisted
        for record in parts:
            metadata.apply_record(record)
        assert [t.name for t in metadata.list_topics()] == ["A", "B"]
        assert metadata.get_consumer_offset(group_name="g", topic="A", queue_id=0) == 10
        metadata.flush_consumer_offsets()
        assert _persisted_position(url) == 4 + len(parts)
    finally:
        metadata.stop()

