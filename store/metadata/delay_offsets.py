"""Delay offset repository: delay level (1..18) -> how far its delay queue has been delivered.

The schedule service (RocketMQ's ScheduleMessageService) owns these; it writes them in batches
itself, so unlike consumer offsets they go straight to the database.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Engine
from sqlmodel import col, select

from store.metadata.database import read_transaction, transaction
from store.metadata.models import DelayOffset, DelayOffsetRow
from store.metadata.rules import check_delay_level, check_queue_offset
from store.metadata.versions import MetadataTable, bump_data_version


def get_delay_offset(*, engine: Engine, delay_level: int) -> int | None:
    check_delay_level(delay_level)
    with read_transaction(engine) as session:
        row = session.get(DelayOffsetRow, delay_level)
        return None if row is None else row.queue_offset


def list_delay_offsets(*, engine: Engine) -> list[DelayOffset]:
    """Every stored delay offset, ordered by level."""
    with read_transaction(engine) as session:
        statement = select(DelayOffsetRow).order_by(col(DelayOffsetRow.delay_level))
        return [
            DelayOffset.model_validate(row, from_attributes=True)
            for row in session.exec(statement).all()
        ]


def set_delay_offsets(*, engine: Engine, offsets: Mapping[int, int], now_ms: int) -> int:
    """Store offsets by delay level (either direction); returns how many rows changed."""
    for delay_level, queue_offset in offsets.items():
        check_delay_level(delay_level)
        check_queue_offset(queue_offset)
    with transaction(engine) as session:
        changed_count = 0
        for delay_level, queue_offset in sorted(offsets.items()):
            row = session.get(DelayOffsetRow, delay_level)
            if row is None:
                session.add(
                    DelayOffsetRow(
                        delay_level=delay_level, queue_offset=queue_offset, updated_at_ms=now_ms
                    )
                )
            elif row.queue_offset != queue_offset:
                row.queue_offset = queue_offset
                row.updated_at_ms = now_ms
            else:
                continue
            changed_count += 1
        if changed_count:
            bump_data_version(session, MetadataTable.DELAY_OFFSET, now_ms=now_ms)
        return changed_count


def set_delay_offset(*, engine: Engine, delay_level: int, queue_offset: int, now_ms: int) -> bool:
    """Store one level's offset; True when the stored value changed."""
    return set_delay_offsets(engine=engine, offsets={delay_level: queue_offset}, now_ms=now_ms) > 0
