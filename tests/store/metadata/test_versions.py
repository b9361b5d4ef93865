"""Data versions: seeded by the migration, one per table, read together."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlmodel import SQLModel

from store.metadata import (
    DataVersion,
    MetadataTable,
    create_group,
    create_topic,
    get_data_versions,
    set_delay_offset,
)
from tests.support.metadata import FakeClock


def test_versioned_tables_are_model_tables() -> None:
    """Every MetadataTable value names a real table, so a version row belongs to a table."""
    assert {table.value for table in MetadataTable} <= set(SQLModel.metadata.tables)


def test_versions_start_at_zero_and_move_independently(engine: Engine, clock: FakeClock) -> None:
    """Fresh databases have every version at zero; a change bumps only its own table's version."""
    assert get_data_versions(engine=engine) == {
        table: DataVersion(counter=0, timestamp_ms=0) for table in MetadataTable
    }
    create_topic(engine=engine, name="t", now_ms=clock.advance())
    create_group(engine=engine, name="g", now_ms=clock.advance())
    create_group(engine=engine, name="h", now_ms=clock.advance())
    set_delay_offset(engine=engine, delay_level=1, queue_offset=1, now_ms=clock.advance())
    versions = get_data_versions(engine=engine)
    assert {table: version.counter for table, version in versions.items()} == {
        MetadataTable.TOPIC_CONFIG: 1,
        MetadataTable.SUBSCRIPTION_GROUP: 2,
        MetadataTable.CONSUMER_OFFSET: 0,
        MetadataTable.DELAY_OFFSET: 1,
    }
    assert versions[MetadataTable.SUBSCRIPTION_GROUP].timestamp_ms == clock() - 1
