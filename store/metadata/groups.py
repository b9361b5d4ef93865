"""Subscription group repository: a consumer group's switches and retry policy."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from store.metadata.changes import delete_row_and_offsets, update_row
from store.metadata.database import read_transaction, transaction
from store.metadata.errors import GroupAlreadyExists, GroupNotFound
from store.metadata.models import ConsumerOffsetRow, SubscriptionGroup, SubscriptionGroupRow
from store.metadata.rules import (
    check_backoff,
    check_group_name,
    check_queue_count,
    check_retry_times_max,
)
from store.metadata.versions import MetadataTable, bump_data_version

# RocketMQ's SubscriptionGroupConfig defaults.
DEFAULT_RETRY_QUEUE_COUNT = 1
DEFAULT_RETRY_TIMES_MAX = 16


def create_group(
    *,
    engine: Engine,
    name: str,
    now_ms: int,
    consume_enabled: bool = True,
    broadcast_enabled: bool = False,
    retry_queue_count: int = DEFAULT_RETRY_QUEUE_COUNT,
    retry_times_max: int = DEFAULT_RETRY_TIMES_MAX,
    backoff: str = "",
    fifo: bool = False,
) -> SubscriptionGroup:
    """Create a subscription group; GroupAlreadyExists when it exists."""
    check_group_name(name)
    check_queue_count("retry_queue_count", retry_queue_count, minimum=0)
    check_retry_times_max(retry_times_max)
    check_backoff(backoff)
    row = SubscriptionGroupRow(
        name=name,
        consume_enabled=consume_enabled,
        broadcast_enabled=broadcast_enabled,
        retry_queue_count=retry_queue_count,
        retry_times_max=retry_times_max,
        backoff=backoff,
        fifo=fifo,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
    )
    try:
        with transaction(engine) as session:
            if session.get(SubscriptionGroupRow, name) is not None:
                raise GroupAlreadyExists(f"group {name!r} already exists")
            session.add(row)
            session.flush()
            bump_data_version(session, MetadataTable.SUBSCRIPTION_GROUP, now_ms=now_ms)
    except IntegrityError as error:
        # Another connection created it between our check and our insert.
        raise GroupAlreadyExists(f"group {name!r} already exists") from error
    return _public(row)


def find_group(*, engine: Engine, name: str) -> SubscriptionGroup | None:
    check_group_name(name)
    with read_transaction(engine) as session:
        row = session.get(SubscriptionGroupRow, name)
        return None if row is None else _public(row)


def get_group(*, engine: Engine, name: str) -> SubscriptionGroup:
    group = find_group(engine=engine, name=name)
    if group is None:
        raise GroupNotFound(f"group {name!r} does not exist")
    return group


def list_groups(*, engine: Engine) -> list[SubscriptionGroup]:
    """Every subscription group, ordered by name."""
    with read_transaction(engine) as session:
        statement = select(SubscriptionGroupRow).order_by(col(SubscriptionGroupRow.name))
        return [_public(row) for row in session.exec(statement).all()]


def update_group(
    *,
    engine: Engine,
    name: str,
    now_ms: int,
    consume_enabled: bool | None = None,
    broadcast_enabled: bool | None = None,
    retry_queue_count: int | None = None,
    retry_times_max: int | None = None,
    backoff: str | None = None,
    fifo: bool | None = None,
) -> SubscriptionGroup:
    """Change the given fields (None keeps a field, a backoff of "" is the broker's
    default); identical values write nothing."""
    check_group_name(name)
    if retry_queue_count is not None:
        check_queue_count("retry_queue_count", retry_queue_count, minimum=0)
    if retry_times_max is not None:
        check_retry_times_max(retry_times_max)
    if backoff is not None:
        check_backoff(backoff)
    changes: dict[str, bool | int | str | None] = {
        "consume_enabled": consume_enabled,
        "broadcast_enabled": broadcast_enabled,
        "retry_queue_count": retry_queue_count,
        "retry_times_max": retry_times_max,
        "backoff": backoff,
        "fifo": fifo,
    }
    with transaction(engine) as session:
        row = _get_row(session, name)
        update_row(session, row, MetadataTable.SUBSCRIPTION_GROUP, changes, now_ms=now_ms)
        return _public(row)


def delete_group(*, engine: Engine, name: str, now_ms: int) -> None:
    """Delete a subscription group and its consumer offsets."""
    check_group_name(name)
    with transaction(engine) as session:
        delete_row_and_offsets(session, _get_row(session, name), MetadataTable.SUBSCRIPTION_GROUP,
                               col(ConsumerOffsetRow.group_name) == name, now_ms=now_ms)


def _get_row(session: Session, name: str) -> SubscriptionGroupRow:
    row = session.get(SubscriptionGroupRow, name)
    if row is None:
        raise GroupNotFound(f"group {name!r} does not exist")
    return row


def _public(row: SubscriptionGroupRow) -> SubscriptionGroup:
    return SubscriptionGroup.model_validate(row, from_attributes=True)
