"""Data versions: one monotonic counter and timestamp per metadata table (RocketMQ's DataVersion).

Every repository function that changes a table bumps its version in the same transaction, and
only when something really changed, so a slave can compare versions to tell if its copy is stale.
"""

from __future__ import annotations

import enum

from sqlalchemy import Engine
from sqlmodel import Session

from store.metadata.database import read_transaction
from store.metadata.models import DataVersion, DataVersionRow


class MetadataTable(enum.StrEnum):
    """The four tables RocketMQ's SlaveSynchronize copies; values are the table names."""

    TOPIC_CONFIG = "topic_config"
    SUBSCRIPTION_GROUP = "subscription_group"
    CONSUMER_OFFSET = "consumer_offset"
    DELAY_OFFSET = "delay_offset"


def get_data_version(*, engine: Engine, table: MetadataTable) -> DataVersion:
    with read_transaction(engine) as session:
        return read_data_version(session, table)


def get_data_versions(*, engine: Engine) -> dict[MetadataTable, DataVersion]:
    with read_transaction(engine) as session:
        return {table: read_data_version(session, table) for table in MetadataTable}


def read_data_version(session: Session, table: MetadataTable) -> DataVersion:
    row = _version_row(session, table, for_update=False)
    return DataVersion.model_validate(row, from_attributes=True)


def bump_data_version(session: Session, table: MetadataTable, *, now_ms: int) -> DataVersion:
    """Count one more change of `table`; call it inside the transaction that made the change."""
    row = _version_row(session, table, for_update=True)
    row.counter += 1
    row.timestamp_ms = now_ms
    return DataVersion.model_validate(row, from_attributes=True)


def assign_data_version(session: Session, table: MetadataTable, version: DataVersion) -> None:
    """Take the master's version as ours, as a slave does after applying the master's copy."""
    row = _version_row(session, table, for_update=True)
    row.counter = version.counter
    row.timestamp_ms = version.timestamp_ms


def _version_row(session: Session, table: MetadataTable, *, for_update: bool) -> DataVersionRow:
    # FOR UPDATE: on PostgreSQL two concurrent bumps must not both read the same counter.
    row = session.get(DataVersionRow, table.value, with_for_update=for_update)
    # The initial migration seeds one row per table; a missing row is a bug, not bad input.
    assert row is not None, f"data_version row for {table.value!r} is missing"
    return row
