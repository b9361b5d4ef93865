"""Export and import of whole tables: what a master serves and a slave applies."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from store.metadata import (
    DataVersion,
    InvalidExport,
    MetadataTable,
    commit_consumer_offset,
    create_group,
    create_metadata_engine,
    create_topic,
    export_table,
    get_data_version,
    import_delay_offsets,
    import_groups,
    import_topics,
    list_consumer_offsets,
    list_topics,
    merge_consumer_offsets,
    reset_consumer_offset,
    set_delay_offsets,
    update_topic,
)
from tests.support.metadata import FakeClock, database_snapshot, fresh_database_url


@pytest.fixture
def slave(migrated_template: Path, tmp_path: Path) -> Iterator[Engine]:
    """A second migrated database, standing for a slave's."""
    directory = tmp_path / "slave"
    directory.mkdir()
    engine = create_metadata_engine(fresh_database_url(migrated_template, directory))
    yield engine
    engine.dispose()


def _populate(engine: Engine, clock: FakeClock) -> None:
    create_topic(engine=engine, name="orders", now_ms=clock.advance(), read_queue_count=8)
    create_topic(engine=engine, name="audit", now_ms=clock.advance(), permission=4)
    create_group(engine=engine, name="billing", now_ms=clock.advance(), retry_times_max=3)
    create_group(engine=engine, name="ledger", now_ms=clock(), fifo=True)
    commit_consumer_offset(
        engine=engine,
        group_name="billing",
        topic="orders",
        queue_id=7,
        queue_offset=42,
        now_ms=clock.advance(),
    )
    set_delay_offsets(engine=engine, offsets={1: 5, 18: 9}, now_ms=clock.advance())


def _apply(slave: Engine, master: Engine) -> None:
    """The slave sync's order: topics, consumer offsets, delay offsets, groups."""
    import_topics(
        engine=slave, export=export_table(engine=master, table=MetadataTable.TOPIC_CONFIG)
    )
    merge_consumer_offsets(
        engine=slave, export=export_table(engine=master, table=MetadataTable.CONSUMER_OFFSET)
    )
    import_delay_offsets(
        engine=slave, export=export_table(engine=master, table=MetadataTable.DELAY_OFFSET)
    )
    import_groups(
        engine=slave, export=export_table(engine=master, table=MetadataTable.SUBSCRIPTION_GROUP)
    )


def test_export_is_plain_data(engine: Engine, clock: FakeClock) -> None:
    """An export is a dict of table name, data version and rows of JSON-ready values."""
    _populate(engine, clock)
    export = export_table(engine=engine, table=MetadataTable.TOPIC_CONFIG)
    assert export == {
        "table": "topic_config",
        "data_version": {"counter": 2, "timestamp_ms": clock() - 3},
        "rows": [
            {
                "name": "audit",
                "read_queue_count": 4,
                "write_queue_count": 4,
                "permission": 4,
                "created_at_ms": clock() - 3,
                "updated_at_ms": clock() - 3,
            },
            {
                "name": "orders",
                "read_queue_count": 8,
                "write_queue_count": 4,
                "permission": 6,
                "created_at_ms": clock() - 4,
                "updated_at_ms": clock() - 4,
            },
        ],
    }


def test_slave_copy_equals_master(engine: Engine, slave: Engine, clock: FakeClock) -> None:
    """After applying all four exports the slave's tables and versions equal the master's."""
    _populate(engine, clock)
    _apply(slave, engine)
    assert database_snapshot(slave) == database_snapshot(engine)


def test_topics_replaced_only_when_version_differs(
    engine: Engine, slave: Engine, clock: FakeClock
) -> None:
    """Topic import adds, changes and removes rows, and skips an export of the same version."""
    create_topic(engine=slave, name="stale", now_ms=clock())
    create_topic(engine=slave, name="orders", now_ms=clock(), read_queue_count=1)
    _populate(engine, clock)
    export = export_table(engine=engine, table=MetadataTable.TOPIC_CONFIG)
    assert import_topics(engine=slave, export=export)
    assert list_topics(engine=slave) == list_topics(engine=engine)
    assert get_data_version(engine=slave, table=MetadataTable.TOPIC_CONFIG) == DataVersion(
        **export["data_version"]
    )
    assert not import_topics(engine=slave, export=export)
    update_topic(engine=engine, name="orders", now_ms=clock.advance(), write_queue_count=2)
    assert import_topics(
        engine=slave, export=export_table(engine=engine, table=MetadataTable.TOPIC_CONFIG)
    )
    assert list_topics(engine=slave) == list_topics(engine=engine)


def test_groups_and_delay_offsets_are_replaced(
    engine: Engine, slave: Engine, clock: FakeClock
) -> None:
    """Group and delay-offset imports drop what the master does not have."""
    create_group(engine=slave, name="local-only", now_ms=clock())
    set_delay_offsets(engine=slave, offsets={2: 100, 1: 1}, now_ms=clock())
    _populate(engine, clock)
    _apply(slave, engine)
    for table in (MetadataTable.SUBSCRIPTION_GROUP, MetadataTable.DELAY_OFFSET):
        assert export_table(engine=slave, table=table) == export_table(engine=engine, table=table)


def test_consumer_offsets_are_merged(engine: Engine, slave: Engine, clock: FakeClock) -> None:
    """The master's offsets win for its keys, even backwards; the slave's other keys stay."""
    for database in (engine, slave):
        create_topic(engine=database, name="t", now_ms=clock())
        create_group(engine=database, name="g", now_ms=clock())
    for queue_id, queue_offset in ((0, 50), (1, 60)):
        commit_consumer_offset(
            engine=slave,
            group_name="g",
            topic="t",
            queue_id=queue_id,
            queue_offset=queue_offset,
            now_ms=clock(),
        )
    reset_consumer_offset(
        engine=engine, group_name="g", topic="t", queue_id=0, queue_offset=7, now_ms=clock()
    )
    export = export_table(engine=engine, table=MetadataTable.CONSUMER_OFFSET)
    applied = merge_consumer_offsets(engine=slave, export=export)
    assert [(o.queue_id, o.queue_offset) for o in applied] == [(0, 7)]
    merged = list_consumer_offsets(engine=slave)
    assert [(o.queue_id, o.queue_offset) for o in merged] == [(0, 7), (1, 60)]
    version = get_data_version(engine=slave, table=MetadataTable.CONSUMER_OFFSET)
    assert version == DataVersion(**export["data_version"])


def _bad_exports(good: dict[str, Any]) -> list[dict[str, Any]]:
    bad: list[dict[str, Any]] = []
    changes: list[Callable[[dict[str, Any]], object]] = [
        lambda e: e.update(table="subscription_group"),
        lambda e: e.update(rows="nope"),
        lambda e: e.update(data_version={"counter": "1", "timestamp_ms": 0}),
        lambda e: e.pop("data_version"),
        lambda e: e["rows"][1].update(name="bad name"),
        lambda e: e["rows"][1].update(read_queue_count=-1),
        lambda e: e["rows"][1].update(permission="6"),
        lambda e: e["rows"][1].pop("write_queue_count"),
        lambda e: e["rows"].append(copy.deepcopy(e["rows"][0])),
    ]
    for change in changes:
        export = copy.deepcopy(good)
        change(export)
        bad.append(export)
    return bad


def test_bad_exports_are_refused(engine: Engine, slave: Engine, clock: FakeClock) -> None:
    """A malformed export raises InvalidExport naming the problem and the slave is unchanged."""
    _populate(engine, clock)
    create_topic(engine=slave, name="mine", now_ms=clock())
    good = dict(export_table(engine=engine, table=MetadataTable.TOPIC_CONFIG))
    before = database_snapshot(slave)
    for export in _bad_exports(good):
        with pytest.raises(InvalidExport, match="topic_config"):
            import_topics(engine=slave, export=export)
    offsets_export = export_table(engine=engine, table=MetadataTable.CONSUMER_OFFSET)
    bad_offsets = {**offsets_export, "rows": [{**offsets_export["rows"][0], "queue_offset": -1}]}
    with pytest.raises(InvalidExport, match="row 0: offset must be between 0"):
        merge_consumer_offsets(engine=slave, export=bad_offsets)
    groups_export = export_table(engine=engine, table=MetadataTable.SUBSCRIPTION_GROUP)
    bad_groups = {**groups_export, "rows": [{**groups_export["rows"][0], "fifo": 1}]}
    with pytest.raises(InvalidExport, match="subscription_group"):
        import_groups(engine=slave, export=bad_groups)
    assert database_snapshot(slave) == before


# ---- property: export -> import -> export is the identity ------------------------------------

names = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=12)
times_ms = st.integers(0, 2**45)
versions = st.fixed_dictionaries({"counter": st.integers(1, 2**40), "timestamp_ms": times_ms})
topic_rows = st.lists(
    st.fixed_dictionaries(
        {
            "name": names,
            "read_queue_count": st.integers(1, 1024),
            "write_queue_count": st.integers(1, 1024),
            "permission": st.sampled_from([0, 2, 4, 6]),
            "created_at_ms": times_ms,
            "updated_at_ms": times_ms,
        }
    ),
    unique_by=lambda row: row["name"],
    max_size=8,
)
group_rows = st.lists(
    st.fixed_dictionaries(
        {
            "name": names,
            "consume_enabled": st.booleans(),
            "broadcast_enabled": st.booleans(),
            "retry_queue_count": st.integers(0, 1024),
            "retry_times_max": st.integers(0, 128),
            "backoff": st.sampled_from(["", "table", "exponential:1000:2.0:60000"]),
            "fifo": st.booleans(),
            "created_at_ms": times_ms,
            "updated_at_ms": times_ms,
        }
    ),
    unique_by=lambda row: row["name"],
    max_size=8,
)
offset_rows = st.lists(
    st.fixed_dictionaries(
        {
            "group_name": names,
            "topic": names,
            "queue_id": st.integers(0, 1023),
            "queue_offset": st.integers(0, 2**53 - 1),
            "updated_at_ms": times_ms,
        }
    ),
    unique_by=lambda row: (row["group_name"], row["topic"], row["queue_id"]),
    max_size=8,
)
delay_rows = st.lists(
    st.fixed_dictionaries(
        {
            "delay_level": st.integers(1, 18),
            "queue_offset": st.integers(0, 2**53 - 1),
            "updated_at_ms": times_ms,
        }
    ),
    unique_by=lambda row: row["delay_level"],
    max_size=18,
)


def _sorted(rows: list[dict[str, Any]], *key_fields: str) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: tuple(row[field] for field in key_fields))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    topic_rows=topic_rows,
    group_rows=group_rows,
    offset_rows=offset_rows,
    delay_rows=delay_rows,
    versions=st.lists(versions, min_size=4, max_size=4),
)
def test_import_then_export_round_trips(
    migrated_template: Path,
    topic_rows: list[dict[str, Any]],
    group_rows: list[dict[str, Any]],
    offset_rows: list[dict[str, Any]],
    delay_rows: list[dict[str, Any]],
    versions: list[dict[str, int]],
) -> None:
    """Any valid export applied to an empty database exports back exactly as it was."""
    exports = {
        MetadataTable.TOPIC_CONFIG: (_sorted(topic_rows, "name"), import_topics),
        MetadataTable.SUBSCRIPTION_GROUP: (_sorted(group_rows, "name"), import_groups),
        MetadataTable.CONSUMER_OFFSET: (
            _sorted(offset_rows, "group_name", "topic", "queue_id"),
            merge_consumer_offsets,
        ),
        MetadataTable.DELAY_OFFSET: (_sorted(delay_rows, "delay_level"), import_delay_offsets),
    }
    with tempfile.TemporaryDirectory() as directory:
        engine = create_metadata_engine(fresh_database_url(migrated_template, Path(directory)))
        try:
            for (table, (rows, apply)), version in zip(exports.items(), versions, strict=True):
                export = {"table": table.value, "data_version": version, "rows": rows}
                apply(engine=engine, export=copy.deepcopy(export))
                assert export_table(engine=engine, table=table) == export
        finally:
            engine.dispose()
