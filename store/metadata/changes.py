"""Row changes the topic and group repositories share: a partial update, and a delete that takes
the consumer offsets kept for the row along. Each bumps the data versions of what it changed, in
the caller's transaction."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import ColumnElement, delete
from sqlmodel import Session

from store.metadata.database import execute_delete
from store.metadata.models import ConsumerOffsetRow, SubscriptionGroupRow, TopicConfigRow
from store.metadata.versions import MetadataTable, bump_data_version


def update_row(session: Session, row: TopicConfigRow | SubscriptionGroupRow, table: MetadataTable,
               changes: Mapping[str, object], *, now_ms: int) -> None:
    """Set the fields of `changes` (None keeps a field); when one really changed, stamp
    `updated_at_ms` and bump `table`'s data version. Identical values write nothing."""
    changed = False
    for field, value in changes.items():
        if value is not None and getattr(row, field) != value:
            setattr(row, field, value)
            changed = True
    if changed:
        row.updated_at_ms = now_ms
        bump_data_version(session, table, now_ms=now_ms)


def delete_row_and_offsets(session: Session, row: TopicConfigRow | SubscriptionGroupRow,
                           table: MetadataTable, offsets: ColumnElement[bool], *,
                           now_ms: int) -> None:
    """Delete `row` and the consumer offsets `offsets` selects; bump `table`'s data version,
    and the consumer offsets' when one was removed."""
    session.delete(row)
    removed_count = execute_delete(session, delete(ConsumerOffsetRow).where(offsets))
    bump_data_version(session, table, now_ms=now_ms)
    if removed_count:
        bump_data_version(session, MetadataTable.CONSUMER_OFFSET, now_ms=now_ms)
