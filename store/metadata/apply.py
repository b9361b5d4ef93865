"""Metadata records applied to the tables: each a pure function of the tables and the record.

A put writes the record's whole row (the same times on every replica), a delete removes the row
and its consumer offsets when the row is there (applying it again is nothing), and the data
version of a table moves only when its rows changed. `log_position` says how far the tables
follow the log (store/metadata/models.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import ColumnElement, Engine, delete
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Session, SQLModel, col, select

from store.metadata.changes import delete_row_and_offsets
from store.metadata.database import execute_delete, read_transaction, transaction
from store.metadata.log_records import (
    GroupDelete,
    GroupPut,
    MetadataSnapshot,
    TopicDelete,
    TopicPut,
)
from store.metadata.models import (
    ConsumerOffset,
    ConsumerOffsetRow,
    LogPosition,
    LogPositionRow,
    SubscriptionGroup,
    SubscriptionGroupRow,
    TopicConfig,
    TopicConfigRow,
)
from store.metadata.versions import MetadataTable, bump_data_version
from store.system_topics import SnapshotAt

METADATA_STREAM = "metadata"
_Row = TypeVar("_Row", TopicConfigRow, SubscriptionGroupRow)


def put_topic(engine: Engine, change: TopicPut) -> TopicConfig:
    return put_topics(engine, (change,))[0]


def put_topics(engine: Engine, changes: Sequence[TopicPut]) -> list[TopicConfig]:
    """Every topic's row as the records say, in one transaction."""
    configs = []
    with transaction(engine) as session:
        changed_ms = 0
        names = [change.name for change in changes]
        existing = {row.name: row for row in session.exec(
            select(TopicConfigRow).where(col(TopicConfigRow.name).in_(names))).all()}
        for change in changes:
            row, changed = _put_row(session, TopicConfigRow, existing.get(change.name), change)
            existing[change.name] = row
            if changed:
                changed_ms = max(changed_ms, change.updated_at_ms)
            configs.append(row)
        if changed_ms:
            bump_data_version(session, MetadataTable.TOPIC_CONFIG, now_ms=changed_ms)
        session.flush()
        return [TopicConfig.model_validate(row, from_attributes=True) for row in configs]


def delete_topic(engine: Engine, change: TopicDelete) -> bool:
    """Whether the topic was there. Its consumer offsets go either way: the tables must not
    keep rows of it that the log's order says are gone."""
    with transaction(engine) as session:
        row = session.get(TopicConfigRow, change.name)
        if row is None:
            _delete_offsets(session, col(ConsumerOffsetRow.topic) == change.name, change.at_ms)
            return False
        delete_row_and_offsets(session, row, MetadataTable.TOPIC_CONFIG,
                               col(ConsumerOffsetRow.topic) == change.name, now_ms=change.at_ms)
        return True


def put_group(engine: Engine, change: GroupPut) -> SubscriptionGroup:
    with transaction(engine) as session:
        row, changed = _put_row(session, SubscriptionGroupRow,
                                session.get(SubscriptionGroupRow, change.name), change)
        if changed:
            bump_data_version(session, MetadataTable.SUBSCRIPTION_GROUP,
                              now_ms=change.updated_at_ms)
        session.flush()
        return SubscriptionGroup.model_validate(row, from_attributes=True)


def _put_row(session: Session, row_class: type[_Row], row: _Row | None,
             change: TopicPut | GroupPut) -> tuple[_Row, bool]:
    """The row as the record says (added when absent); whether anything changed."""
    fields = asdict(change)
    if row is None:
        row = row_class(**fields)
        session.add(row)
        return row, True
    if all(getattr(row, name) == value for name, value in fields.items()):
        return row, False
    for name, value in fields.items():
        setattr(row, name, value)
    return row, True


def delete_group(engine: Engine, change: GroupDelete) -> bool:
    """Whether the group was there."""
    with transaction(engine) as session:
        row = session.get(SubscriptionGroupRow, change.name)
        if row is None:
            _delete_offsets(session, col(ConsumerOffsetRow.group_name) == change.name,
                            change.at_ms)
            return False
        delete_row_and_offsets(session, row, MetadataTable.SUBSCRIPTION_GROUP,
                               col(ConsumerOffsetRow.group_name) == change.name,
                               now_ms=change.at_ms)
        return True


def _delete_offsets(session: Session, which: ColumnElement[bool], now_ms: int) -> None:
    if execute_delete(session, delete(ConsumerOffsetRow).where(which)):
        bump_data_version(session, MetadataTable.CONSUMER_OFFSET, now_ms=now_ms)


class AppliedPosition(NamedTuple):
    """A LogPosition as plain ints: every applied record moves it (a LogPosition is built
    only for who reads or writes it)."""

    queue_offset: int
    commit_log_offset: int
    updated_at_ms: int

    @classmethod
    def of(cls, position: LogPosition) -> AppliedPosition:
        return cls(position.queue_offset, position.commit_log_offset, position.updated_at_ms)

    def model(self) -> LogPosition:
        return LogPosition.model_construct(queue_offset=self.queue_offset,
                                           commit_log_offset=self.commit_log_offset,
                                           updated_at_ms=self.updated_at_ms)


def put_snapshot(engine: Engine, snapshot: MetadataSnapshot
                 ) -> tuple[list[TopicConfig], list[SubscriptionGroup], list[ConsumerOffset]]:
    """A snapshot part's rows, offsets included, in one transaction of bulk statements: part 0
    first empties the tables the records fill (the snapshot is the whole of them); a part
    applied again (a restart between its commit and its position's) replaces its own rows.
    Returns the rows written, for the caller's view and offset table."""
    now_ms = _snapshot_ms(snapshot)
    # Rows as plain dicts, and the public models built without validating again: the record
    # was checked field by field when it was decoded (thousands of rows a part).
    topic_rows: list[dict[str, Any]] = [asdict(topic) for topic in snapshot.topics]
    group_rows: list[dict[str, Any]] = [asdict(group) for group in snapshot.groups]
    offset_rows: list[dict[str, Any]] = [
        {"group_name": o.group_name, "topic": o.topic, "queue_id": o.queue_id,
         "queue_offset": o.queue_offset, "updated_at_ms": o.at_ms} for o in snapshot.offsets]
    with transaction(engine) as session:
        tables = ((TopicConfigRow, MetadataTable.TOPIC_CONFIG, topic_rows, ("name",)),
                  (SubscriptionGroupRow, MetadataTable.SUBSCRIPTION_GROUP, group_rows,
                   ("name",)),
                  (ConsumerOffsetRow, MetadataTable.CONSUMER_OFFSET, offset_rows,
                   ("group_name", "topic", "queue_id")))
        for model, table, rows, key in tables:
            changed = snapshot.part == 0 and execute_delete(session, delete(model)) > 0
            if rows:
                _upsert_all(session, model, key, rows)
            if changed or rows:
                bump_data_version(session, table, now_ms=now_ms)
    return ([TopicConfig.model_construct(**row) for row in topic_rows],
            [SubscriptionGroup.model_construct(**row) for row in group_rows],
            [ConsumerOffset.model_construct(**row) for row in offset_rows])


def _upsert_all(session: Session, model: type[SQLModel], key: tuple[str, ...],
                rows: list[dict[str, Any]]) -> None:
    """Insert the rows, replacing any of the same key, in one statement (SQLite and
    PostgreSQL both say ON CONFLICT DO UPDATE)."""
    dialect = session.get_bind().dialect.name
    statement = (postgresql_insert if dialect == "postgresql" else sqlite_insert)(model)
    columns = [name for name in rows[0] if name not in key]
    statement = statement.on_conflict_do_update(
        index_elements=list(key), set_={name: statement.excluded[name] for name in columns})
    session.execute(statement, rows)


def _snapshot_ms(snapshot: MetadataSnapshot) -> int:
    """A time for the data versions a snapshot moves, from its rows (the same on every
    replica): the latest change it holds."""
    times = [topic.updated_at_ms for topic in snapshot.topics]
    times += [group.updated_at_ms for group in snapshot.groups]
    times += [offset.at_ms for offset in snapshot.offsets]
    return max(times, default=0)


def read_log_position(engine: Engine) -> LogPosition:
    with read_transaction(engine) as session:
        row = session.get(LogPositionRow, METADATA_STREAM)
        if row is None:
            return LogPosition(queue_offset=0, commit_log_offset=0, updated_at_ms=0)
        return LogPosition.model_validate(row, from_attributes=True)


def clear_applied(engine: Engine, now_ms: int) -> None:
    """Empty what the log's records fill (topics, groups, offsets) and set the position back
    to the start, in one transaction: the records are then applied again from the first."""
    with transaction(engine) as session:
        for model, table in ((TopicConfigRow, MetadataTable.TOPIC_CONFIG),
                             (SubscriptionGroupRow, MetadataTable.SUBSCRIPTION_GROUP),
                             (ConsumerOffsetRow, MetadataTable.CONSUMER_OFFSET)):
            if execute_delete(session, delete(model)):
                bump_data_version(session, table, now_ms=now_ms)
        row = session.get(LogPositionRow, METADATA_STREAM)
        if row is not None:
            row.queue_offset = row.commit_log_offset = 0
            row.updated_at_ms = now_ms
            _set_snapshot(row, None)


def write_log_position(engine: Engine, position: LogPosition,
                       snapshot: SnapshotAt | None = None) -> None:
    """Only ever forward: the tables hold every record below the position written, and
    `snapshot` is the last whole snapshot among them (None: not known)."""
    with transaction(engine) as session:
        row = session.get(LogPositionRow, METADATA_STREAM)
        if row is None:
            row = LogPositionRow(name=METADATA_STREAM, queue_offset=position.queue_offset,
                                 commit_log_offset=position.commit_log_offset,
                                 updated_at_ms=position.updated_at_ms)
            session.add(row)
        elif position.queue_offset > row.queue_offset:
            row.queue_offset = position.queue_offset
            row.commit_log_offset = position.commit_log_offset
            row.updated_at_ms = position.updated_at_ms
        else:
            return
        _set_snapshot(row, snapshot)


def snapshot_of(position: LogPosition) -> SnapshotAt | None:
    """The last whole snapshot a persisted position names; None when it names none."""
    if position.snapshot_queue_offset is None or position.snapshot_commit_log_offset is None \
            or position.snapshot_parts is None:
        return None
    return SnapshotAt(position.snapshot_queue_offset, position.snapshot_commit_log_offset,
                      position.snapshot_parts)


def _set_snapshot(row: LogPositionRow, snapshot: SnapshotAt | None) -> None:
    row.snapshot_queue_offset, row.snapshot_commit_log_offset, row.snapshot_parts = (
        (None, None, None) if snapshot is None else snapshot)
