"""Metadata records: their bytes round-trip, and applying them is deterministic. Any replica that
applies the same records in the same order holds the same tables, and a restart that applies
a suffix of them again (from any earlier position) ends where the first run did."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from store.dispatch import SystemRecord
from store.metadata import MetadataStore, MetadataTable, export_table
from store.metadata.log_records import (
    RECORD_VERSION,
    GroupDelete,
    GroupPut,
    MetadataChange,
    MetadataRecordError,
    MetadataSnapshot,
    OffsetSet,
    QueueStart,
    TopicDelete,
    TopicPut,
    TopicsPut,
    decode,
    encode,
    op_of,
    snapshot_parts,
)
from tests.support.examples import examples
from tests.support.metadata import fresh_database_url

_TOPICS = st.sampled_from(["A", "B", "C"])
_GROUPS = st.sampled_from(["g1", "g2"])
_TIMES = st.integers(min_value=1, max_value=2**40)
_TOPIC_PUTS = st.builds(TopicPut, name=_TOPICS, read_queue_count=st.integers(1, 8),
                        write_queue_count=st.integers(1, 8),
                        permission=st.sampled_from([2, 4, 6]), created_at_ms=_TIMES,
                        updated_at_ms=_TIMES)
_CHANGES: st.SearchStrategy[MetadataChange] = st.one_of(
    _TOPIC_PUTS,
    st.builds(TopicDelete, name=_TOPICS, at_ms=_TIMES),
    st.builds(TopicsPut, topics=st.lists(_TOPIC_PUTS, max_size=3).map(tuple)),
    st.builds(GroupPut, name=_GROUPS, consume_enabled=st.booleans(),
              broadcast_enabled=st.booleans(), retry_queue_count=st.integers(0, 4),
              retry_times_max=st.integers(0, 16), created_at_ms=_TIMES, updated_at_ms=_TIMES,
              backoff=st.sampled_from(["", "table", "exponential:500:1.5:60000"]),
              fifo=st.booleans()),
    st.builds(GroupDelete, name=_GROUPS, at_ms=_TIMES),
    st.builds(OffsetSet, group_name=_GROUPS, topic=_TOPICS, queue_id=st.integers(0, 3),
              queue_offset=st.integers(0, 10**6), reset=st.booleans(), at_ms=_TIMES),
)
# 40 examples in `make test`, 20 in `make unit`: the bugs these found are pinned (the
# @examples below; test_metadata_snapshots' plain tests of a snapshot after a gap and passed
# over). Each example applies the records to two or three SQLite databases.
_SETTINGS = settings(max_examples=examples(40, unit=20), deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@given(_CHANGES)
def test_a_change_round_trips_through_its_record(change: MetadataChange) -> None:
    assert decode(op_of(change), encode(change)) == change


def test_a_group_without_its_own_backoff_writes_the_bytes_of_builds_before_it() -> None:
    older = (b'{"v":1,"op":"group.put","name":"g","consume_enabled":true,'
             b'"broadcast_enabled":false,"retry_queue_count":1,"retry_times_max":16,'
             b'"created_at_ms":5,"updated_at_ms":6}')
    assert encode(GroupPut("g", True, False, 1, 16, 5, 6)) == older
    assert decode("group.put", older) == GroupPut("g", True, False, 1, 16, 5, 6, "")
    own = GroupPut("g", True, False, 1, 16, 5, 6, "exponential:500:1.5:60000")
    assert b'"backoff":"exponential:500:1.5:60000"' in encode(own)
    assert decode("group.put", encode(own)) == own
    plain = GroupPut("h", True, False, 1, 16, 5, 6)
    snapshot = snapshot_parts([], [own, plain], [], [])[0]
    body = encode(snapshot)
    assert body.count(b'"backoff"') == 1  # the plain group as older builds wrote it
    assert decode(op_of(snapshot), body) == snapshot


def test_a_group_not_fifo_writes_the_bytes_of_builds_before_it() -> None:
    """fifo is left out of a group's record and snapshot item when False (older builds read
    them); a FIFO group's carries it, and reads back."""
    plain = GroupPut("g", True, False, 1, 16, 5, 6)
    assert b'"fifo"' not in encode(plain)
    fifo = GroupPut("f", True, False, 1, 16, 5, 6, fifo=True)
    assert b'"fifo":true' in encode(fifo)
    assert decode("group.put", encode(fifo)) == fifo
    snapshot = snapshot_parts([], [fifo, plain], [], [])[0]
    body = encode(snapshot)
    assert body.count(b'"fifo"') == 1
    assert decode(op_of(snapshot), body) == snapshot


@given(st.builds(OffsetSet, group_name=_GROUPS, topic=_TOPICS, queue_id=st.integers(0, 3),
                 queue_offset=st.integers(0, 2**53), reset=st.booleans(), at_ms=_TIMES))
def test_an_offset_commit_is_written_as_every_change_is(change: OffsetSet) -> None:
    """The commit's own encoder writes the bytes the general layout gives (older builds
    and every replica read them)."""
    general = {"v": RECORD_VERSION, "op": op_of(change),
               **{name: getattr(change, name) for name in change.__dataclass_fields__}}
    assert encode(change) == orjson.dumps(general)


@pytest.mark.parametrize(("op", "body"), [
    ("group.put", b'{"v": 1, "op": "group.put", "name": "g", "consume_enabled": true, '
                  b'"broadcast_enabled": false, "retry_queue_count": 1, "retry_times_max": 16, '
                  b'"created_at_ms": 5, "updated_at_ms": 6, "backoff": 7}'),
    ("group.put", b'{"v": 1, "op": "group.put", "name": "g", "consume_enabled": true, '
                  b'"broadcast_enabled": false, "retry_queue_count": 1, "retry_times_max": 16, '
                  b'"created_at_ms": 5, "updated_at_ms": 6, "fifo": 1}'),
    ("topic.put", b"not json"),
    ("topic.put", b"[1, 2]"),
    ("topic.put", b'{"v": 2, "op": "topic.put"}'),
    ("topic.put", b'{"v": 1, "op": "group.put", "name": "g"}'),
    ("topic.put", b'{"v": 1, "op": "topic.put", "name": "A"}'),
    ("topic.delete", b'{"v": 1, "op": "topic.delete", "name": 7, "at_ms": 1}'),
    ("offset.set", b'{"v": 1, "op": "offset.set", "group_name": "g", "topic": "A", '
                   b'"queue_id": 0, "queue_offset": "5", "reset": false, "at_ms": 1}'),
    ("offset.set", b'{"v": 1, "op": "offset.set", "group_name": "g", "topic": "A", '
                   b'"queue_id": true, "queue_offset": 5, "reset": false, "at_ms": 1}'),
    ("offset.set", b'{"v": 1, "op": "offset.set", "group_name": "g", "topic": "A", '
                   b'"queue_id": 0, "queue_offset": 5, "reset": 0, "at_ms": 1}'),
    ("offset.set", b'{"v": 1, "op": "offset.set", "group_name": "g", "topic": "A", '
                   b'"queue_id": 0, "queue_offset": 5, "at_ms": 1, "extra": false}'),
    ("topic.rename", b"{}"),
    ("topics.put", b'{"v": 1, "op": "topics.put", "topics": [{"name": "A"}]}'),
    ("topics.put", b'{"v": 1, "op": "topics.put", "topics": 3}'),
])
def test_a_record_this_build_cannot_read_is_refused_by_name(op: str, body: bytes) -> None:
    with pytest.raises(MetadataRecordError):
        decode(op, body)


def _records(changes: list[MetadataChange]) -> list[SystemRecord]:
    return [SystemRecord(1000 * number, number, op_of(change), encode(change))
            for number, change in enumerate(changes)]


def _tables(metadata: MetadataStore) -> dict[MetadataTable, object]:
    metadata.flush_consumer_offsets()
    return {table: export_table(engine=metadata._engine, table=table)["rows"]
            for table in MetadataTable}


_counter = itertools.count()


@_SETTINGS
@example(changes=[TopicsPut((TopicPut("B", 1, 1, 2, 1, 1), TopicPut("B", 1, 1, 2, 1, 1)))],
         flushed_at=0, crashed_at=0)  # a batch naming a topic twice applies as one row
@example(changes=[OffsetSet("g2", "A", 0, 0, False, 1), TopicDelete("A", 2)], flushed_at=1,
         crashed_at=2)  # a delete must take the persisted offsets of a topic never created
@given(changes=st.lists(_CHANGES, max_size=25), flushed_at=st.integers(0, 25),
       crashed_at=st.integers(0, 25))
def test_replicas_and_restarts_hold_the_tables_the_log_says(
        migrated_template: Path, tmp_path: Path, changes: list[MetadataChange],
        flushed_at: int, crashed_at: int) -> None:
    records = _records(changes)
    directory = tmp_path / str(next(_counter))
    (directory / "leader").mkdir(parents=True)
    (directory / "replica").mkdir()
    leader = MetadataStore(fresh_database_url(migrated_template, directory / "leader"))
    replica_url = fresh_database_url(migrated_template, directory / "replica")
    replica = MetadataStore(replica_url)
    try:
        for record in records:
            leader.apply_record(record)
        # The replica persists its position part way, applies more (its topic and group rows
        # are written with the position, its offsets only in memory), crashes, and on
        # restart applies again from the position it persisted.
        flushed = min(flushed_at, len(records))
        crashed = max(flushed, min(crashed_at, len(records)))
        for record in records[:flushed]:
            replica.apply_record(record)
        replica.flush_consumer_offsets()
        for record in records[flushed:crashed]:
            replica.apply_record(record)
        replica._engine.dispose()  # a crash: no stop, nothing more flushed
        restarted = MetadataStore(replica_url)
        # A topic or group record persists the position with its rows (and the offsets
        # before it); offset records wait for the flush.
        persisted = max([flushed, *(index + 1 for index in range(flushed, crashed)
                                    if not isinstance(changes[index], OffsetSet))])
        assert restarted.log_position.queue_offset == persisted
        for record in records[flushed:]:
            restarted.apply_record(record)
        assert _tables(restarted) == _tables(leader)
        assert restarted.log_position.queue_offset == len(records)
        restarted.stop()
    finally:
        leader.stop()


def test_applying_a_suffix_again_changes_nothing(migrated_template: Path,
                                                 tmp_path: Path) -> None:
    metadata = MetadataStore(fresh_database_url(migrated_template, tmp_path))
    changes: list[MetadataChange] = [
        TopicPut("A", 4, 4, 6, 10, 10), GroupPut("g1", True, False, 1, 16, 11, 11),
        OffsetSet("g1", "A", 0, 5, False, 12), OffsetSet("g1", "A", 0, 3, False, 13),
        TopicPut("A", 8, 8, 6, 10, 14), OffsetSet("g1", "A", 1, 2, True, 15),
        GroupDelete("g1", 16), GroupPut("g1", True, False, 1, 16, 17, 17),
        OffsetSet("g1", "A", 0, 1, False, 18), TopicDelete("B", 19),
    ]
    records = _records(changes)
    for record in records:
        metadata.apply_record(record)
    once = _tables(metadata)
    assert metadata.get_consumer_offset(group_name="g1", topic="A", queue_id=0) == 1
    assert metadata.get_topic(name="A").read_queue_count == 8
    for record in records:  # below the position: in the tables already, skipped
        assert metadata.apply_record(record) is None
    for start in range(len(changes)):  # and as changes, applied again: the same tables
        for change in changes[start:]:
            metadata.apply_change(change)
        assert _tables(metadata) == once, start
    metadata.stop()


def test_a_topic_or_group_row_is_durable_with_the_position_that_holds_it(
        migrated_template: Path, tmp_path: Path) -> None:
    """A topic or group record's rows are durable when applied: so is the position, with the
    offsets committed before it. (Were the position left for the periodic flush, a power cut
    that took the record from the log would leave its rows where no rebuild looks: the
    classic simulation's seed 7.) An offset record alone waits for the flush, as before."""
    url = fresh_database_url(migrated_template, tmp_path)
    metadata = MetadataStore(url)
    records = _records([OffsetSet("g", "A", 0, 5, False, 1), TopicPut("A", 4, 4, 6, 2, 2),
                        OffsetSet("g", "A", 0, 6, False, 3)])
    for record in records:
        metadata.apply_record(record)
    durable = MetadataStore(url)  # what a crash now would leave (no flush since)
    try:
        assert durable.log_position.queue_offset == 2
        assert durable.log_position.commit_log_offset == 1000
        assert durable.get_consumer_offset(group_name="g", topic="A", queue_id=0) == 5
    finally:
        durable.stop()
        metadata.stop()


def test_a_snapshot_field_of_a_newer_build_is_passed_over_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """A newer build's snapshot holds a field this build does not know (state of a feature it
    lacks): the part decodes with what it knows, and the field is named in one warning
    (before: the part was refused, and dispatch stopped at it for good)."""
    snapshot = MetadataSnapshot(0, 1, (TopicPut("A", 4, 4, 6, 1, 1),), (), (),
                                (QueueStart("A", 0, 3),))
    fields = orjson.loads(encode(snapshot))
    body = orjson.dumps({**fields, "later_state": [{"x": 1}]})
    caplog.set_level(logging.WARNING, logger="store.metadata.log_records")
    assert decode("snapshot", body) == snapshot
    assert decode("snapshot", body) == snapshot
    assert [record.getMessage().count("later_state") for record in caplog.records] == [1]


def test_a_snapshot_of_a_newer_record_version_is_refused_by_its_version() -> None:
    """What a build must not pass over raises the record version: refused, naming it."""
    snapshot = MetadataSnapshot(0, 1, (), (), (), ())
    body = orjson.dumps({**orjson.loads(encode(snapshot)), "v": RECORD_VERSION + 1})
    with pytest.raises(MetadataRecordError, match=f"version {RECORD_VERSION + 1}"):
        decode("snapshot", body)
