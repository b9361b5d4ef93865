"""The metadata view (store/metadata/view.py): topic and group reads answer from memory, never
from SQL, and every write path keeps them equal to the tables; read-only transactions take no
write lock."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from store.dispatch import SystemRecord
from store.metadata import MetadataStore, MetadataTable, sqlite_database_url
from store.metadata import groups as group_rows
from store.metadata import topics as topic_rows
from store.metadata.database import read_transaction
from store.metadata.log_records import (
    GroupDelete,
    GroupPut,
    TopicDelete,
    TopicPut,
    TopicsPut,
    encode,
    op_of,
)
from store.metadata.topics import NewTopic


@contextmanager
def _statements(store: MetadataStore) -> Iterator[list[str]]:
    """The SQL statements the store's engine runs meanwhile."""
    seen: list[str] = []

    def record(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    engine = store._engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _reads_match_the_tables(store: MetadataStore) -> None:
    """Every read of topics and groups equals what the tables hold, and runs no statement."""
    tables_topics = topic_rows.list_topics(engine=store._engine)
    tables_groups = group_rows.list_groups(engine=store._engine)
    with _statements(store) as seen:
        assert store.list_topics() == tables_topics
        assert store.list_groups() == tables_groups
        for topic in tables_topics:
            assert store.find_topic(name=topic.name) == topic
            assert store.get_topic(name=topic.name) == topic
            assert store.cached_topic(name=topic.name) == topic
            assert store.topic_view(topic.name) == topic
        for group in tables_groups:
            assert store.find_group(name=group.name) == group
            assert store.get_group(name=group.name) == group
        assert store.find_topic(name="Absent") is None
        assert store.topic_view("Absent") is None
        assert store.find_group(name="absent") is None
    assert seen == []


def _record(change: Any, queue_offset: int) -> SystemRecord:
    return SystemRecord(op=op_of(change), body=encode(change), queue_offset=queue_offset,
                        commit_log_offset=queue_offset * 100)


def _open(path: Path) -> MetadataStore:
    return MetadataStore(sqlite_database_url(path / "metadata.sqlite3"))


def _direct_writes(store: MetadataStore, _: Path) -> None:
    store.create_topic(name="A", read_queue_count=2, write_queue_count=2)
    store.create_topics([NewTopic("B", 1, 1), NewTopic("C", 3, 3)])
    store.update_topic(name="B", read_queue_count=4, write_queue_count=4)
    store.delete_topic(name="C")
    store.ensure_writable_topic(name="Auto")
    store.create_group(name="g1")
    store.create_group(name="g2")
    store.update_group(name="g1", retry_times_max=3)
    store.delete_group(name="g2")


def _applied_records(store: MetadataStore, _: Path) -> None:
    changes = [TopicPut("A", 2, 2, 6, 10, 10),
               TopicsPut((TopicPut("B", 1, 1, 6, 11, 11), TopicPut("C", 1, 1, 6, 11, 11))),
               TopicPut("A", 3, 3, 4, 10, 12),
               TopicDelete("B", 13),
               GroupPut("g1", True, False, 1, 16, 14, 14),
               GroupPut("g2", True, False, 1, 16, 14, 14),
               GroupPut("g1", False, True, 2, 5, 14, 15),
               GroupDelete("g2", 16)]
    for queue_offset, change in enumerate(changes):
        store.apply_record(_record(change, queue_offset))


def _a_bootstrap_import(store: MetadataStore, tmp_path: Path) -> None:
    """A slave takes its master's tables (app/broker/slave_sync.py's bootstrap)."""
    store.create_topic(name="SlaveOnly")
    store.create_group(name="slave-only")
    master = _open(tmp_path / "master")
    try:
        master.create_topic(name="M1", read_queue_count=2, write_queue_count=2)
        master.create_topic(name="M2")
        master.create_group(name="mg")
        assert store.import_topics(master.export_table(MetadataTable.TOPIC_CONFIG))
        assert store.import_groups(master.export_table(MetadataTable.SUBSCRIPTION_GROUP))
    finally:
        master.stop()


@pytest.mark.parametrize("writes", [_direct_writes, _applied_records, _a_bootstrap_import])
def test_every_write_path_keeps_the_view_equal_to_the_tables(
        tmp_path: Path, writes: Callable[[MetadataStore, Path], None]) -> None:
    """After direct writes, records applied from the log, or a slave's import, and again
    after a restart (the view loaded from the tables): reads answer what the tables hold,
    without a query."""
    store = _open(tmp_path)
    try:
        _reads_match_the_tables(store)
        writes(store, tmp_path)
        assert store.list_topics() or store.list_groups()
        _reads_match_the_tables(store)
    finally:
        store.stop()
    reopened = _open(tmp_path)
    try:
        _reads_match_the_tables(reopened)
    finally:
        reopened.stop()


def test_a_read_takes_no_write_lock(tmp_path: Path) -> None:
    """While another connection holds SQLite's write lock (a long write), reads that still
    go to the database (data versions, delay offsets, a read transaction) answer at once
    instead of queuing for the lock (BEGIN IMMEDIATE waited out busy_timeout, 5 s, and
    failed "database is locked")."""
    store = _open(tmp_path)
    writer = sqlite3.connect(tmp_path / "metadata.sqlite3", isolation_level=None)
    try:
        store.create_topic(name="T")
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE topic_config SET read_queue_count = 7 WHERE name = 'T'")
        started = time.monotonic()
        results: list[object] = []

        def read() -> None:
            results.append(store.data_versions())
            results.append(store.list_delay_offsets())
            with read_transaction(store._engine) as session:
                results.append(session.connection().exec_driver_sql(
                    "SELECT read_queue_count FROM topic_config").scalar())

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(10)
        assert not reader.is_alive()
        assert time.monotonic() - started < 2.0
        assert results[2] == 4  # the snapshot before the writer's uncommitted change
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        store.stop()
