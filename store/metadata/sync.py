"""Export and import of whole tables as plain data: what a master serves and a slave applies.

An export is `{"table": name, "data_version": {"counter", "timestamp_ms"}, "rows": [dict]}`,
JSON-ready. A slave applies them as RocketMQ's SlaveSynchronize does (reference section 6):
topic config and subscription groups are replaced when the data version differs, delay offsets
are replaced, consumer offsets are merged (the master's offset wins for every key it has, other
keys stay). The slave then takes the master's data version as its own. Every row is validated
before anything is written, so a bad export changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from pydantic import ValidationError
from sqlalchemy import Engine
from sqlmodel import Session, SQLModel, col, select

from store.metadata.database import read_transaction, transaction
from store.metadata.errors import InvalidExport, MetadataError
from store.metadata.models import (
    ConsumerOffset,
    ConsumerOffsetRow,
    DataVersion,
    DelayOffset,
    DelayOffsetRow,
    SubscriptionGroup,
    SubscriptionGroupRow,
    TopicConfig,
    TopicConfigRow,
)
from store.metadata.offsets import OffsetKey, check_offset_key
from store.metadata.rules import (
    check_backoff,
    check_delay_level,
    check_group_name,
    check_permission,
    check_queue_count,
    check_queue_offset,
    check_retry_times_max,
    check_topic_name,
)
from store.metadata.versions import MetadataTable, assign_data_version, read_data_version

# A bound on what one import may carry; far above any real broker's topic or offset count.
IMPORT_ROW_COUNT_MAX = 1_000_000


class DataVersionData(TypedDict):
    counter: int
    timestamp_ms: int


class TableExport(TypedDict):
    table: str
    data_version: DataVersionData
    rows: list[dict[str, Any]]


def _check_topic(topic: TopicConfig) -> None:
    check_topic_name(topic.name)
    check_queue_count("read_queue_count", topic.read_queue_count)
    check_queue_count("write_queue_count", topic.write_queue_count)
    check_permission(topic.permission)


def _check_group(group: SubscriptionGroup) -> None:
    check_group_name(group.name)
    check_queue_count("retry_queue_count", group.retry_queue_count, minimum=0)
    check_retry_times_max(group.retry_times_max)
    check_backoff(group.backoff)


def _check_consumer_offset(offset: ConsumerOffset) -> None:
    check_offset_key(OffsetKey(offset.group_name, offset.topic, offset.queue_id))
    check_queue_offset(offset.queue_offset)


def _check_delay_offset(offset: DelayOffset) -> None:
    check_delay_level(offset.delay_level)
    check_queue_offset(offset.queue_offset)


@dataclass(frozen=True)
class _TableSpec:
    table: MetadataTable
    row_class: type[SQLModel]
    public_class: type[SQLModel]
    key_fields: tuple[str, ...]
    check: Callable[[Any], None]

    def key_of(self, item: SQLModel) -> tuple[object, ...]:
        return tuple(getattr(item, field) for field in self.key_fields)


_SPECS = {
    spec.table: spec
    for spec in (
        _TableSpec(
            MetadataTable.TOPIC_CONFIG, TopicConfigRow, TopicConfig, ("name",), _check_topic
        ),
        _TableSpec(
            MetadataTable.SUBSCRIPTION_GROUP,
            SubscriptionGroupRow,
            SubscriptionGroup,
            ("name",),
            _check_group,
        ),
        _TableSpec(
            MetadataTable.CONSUMER_OFFSET,
            ConsumerOffsetRow,
            ConsumerOffset,
            ("group_name", "topic", "queue_id"),
            _check_consumer_offset,
        ),
        _TableSpec(
            MetadataTable.DELAY_OFFSET,
            DelayOffsetRow,
            DelayOffset,
            ("delay_level",),
            _check_delay_offset,
        ),
    )
}


def export_table(*, engine: Engine, table: MetadataTable) -> TableExport:
    """Every row of `table` and its data version, read in one transaction."""
    spec = _SPECS[table]
    order = [col(getattr(spec.row_class, field)) for field in spec.key_fields]
    with read_transaction(engine) as session:
        version = read_data_version(session, table)
        rows = session.exec(select(spec.row_class).order_by(*order)).all()
        return {
            "table": table.value,
            "data_version": {"counter": version.counter, "timestamp_ms": version.timestamp_ms},
            "rows": [
                spec.public_class.model_validate(row, from_attributes=True).model_dump(mode="json")
                for row in rows
            ],
        }


def import_topics(*, engine: Engine, export: Mapping[str, Any]) -> bool:
    """Replace all topics with the master's when its data version differs; True if applied."""
    return _replace(engine, _SPECS[MetadataTable.TOPIC_CONFIG], export, only_if_stale=True)


def import_groups(*, engine: Engine, export: Mapping[str, Any]) -> bool:
    """Replace all groups with the master's when its data version differs; True if applied."""
    return _replace(engine, _SPECS[MetadataTable.SUBSCRIPTION_GROUP], export, only_if_stale=True)


def import_delay_offsets(*, engine: Engine, export: Mapping[str, Any]) -> bool:
    """Replace all delay offsets with the master's (always, as RocketMQ); True if applied."""
    return _replace(engine, _SPECS[MetadataTable.DELAY_OFFSET], export, only_if_stale=False)


def merge_consumer_offsets(*, engine: Engine, export: Mapping[str, Any]) -> list[ConsumerOffset]:
    """Take the master's offset for every key it has (in either direction), keep the others.

    Returns the offsets applied, for the caller's in-memory table.
    """
    spec = _SPECS[MetadataTable.CONSUMER_OFFSET]
    version, items = _parse(spec, export)
    offsets = [ConsumerOffset.model_validate(item, from_attributes=True) for item in items]
    with transaction(engine) as session:
        existing = _rows_by_key(session, spec, offsets)
        for offset in offsets:
            _apply(session, spec, existing.get(spec.key_of(offset)), offset)
        assign_data_version(session, spec.table, version)
    return offsets


def _replace(
    engine: Engine, spec: _TableSpec, export: Mapping[str, Any], *, only_if_stale: bool
) -> bool:
    version, items = _parse(spec, export)
    with transaction(engine) as session:
        if only_if_stale and read_data_version(session, spec.table) == version:
            return False
        existing = {spec.key_of(row): row for row in session.exec(select(spec.row_class)).all()}
        for item in items:
            _apply(session, spec, existing.pop(spec.key_of(item), None), item)
        for row in existing.values():
            session.delete(row)
        assign_data_version(session, spec.table, version)
        return True


def _rows_by_key(
    session: Session, spec: _TableSpec, items: Sequence[SQLModel]
) -> dict[tuple[object, ...], SQLModel]:
    rows = (session.get(spec.row_class, spec.key_of(item)) for item in items)
    return {spec.key_of(row): row for row in rows if row is not None}


def _apply(session: Session, spec: _TableSpec, row: SQLModel | None, item: SQLModel) -> None:
    """Make `row` (or a new row when None) hold exactly the values of `item`."""
    values = item.model_dump()
    if row is None:
        session.add(spec.row_class.model_validate(values))
        return
    for field, value in values.items():
        if getattr(row, field) != value:
            setattr(row, field, value)


def _parse(spec: _TableSpec, export: Mapping[str, Any]) -> tuple[DataVersion, list[SQLModel]]:
    """Validate a whole export before any of it is written."""
    name = spec.table.value
    if not isinstance(export, Mapping) or export.get("table") != name:
        raise InvalidExport(f"expected an export of table {name!r}")
    rows = export.get("rows")
    if not isinstance(rows, list):
        raise InvalidExport(f"export of {name!r}: 'rows' must be a list")
    if len(rows) > IMPORT_ROW_COUNT_MAX:
        raise InvalidExport(f"export of {name!r}: more than {IMPORT_ROW_COUNT_MAX} rows")
    try:
        version = DataVersion.model_validate(export.get("data_version"), strict=True)
    except ValidationError as error:
        raise InvalidExport(f"export of {name!r}: bad data_version: {error}") from error
    if version.counter < 0 or version.timestamp_ms < 0:
        raise InvalidExport(f"export of {name!r}: data_version must not be negative")
    items: list[SQLModel] = []
    keys: set[tuple[object, ...]] = set()
    for index, row in enumerate(rows):
        try:
            item = spec.public_class.model_validate(row, strict=True)
            spec.check(item)
        except (ValidationError, MetadataError) as error:
            raise InvalidExport(f"export of {name!r}, row {index}: {error}") from error
        key = spec.key_of(item)
        if key in keys:
            raise InvalidExport(f"export of {name!r}, row {index}: duplicate key {key}")
        keys.add(key)
        items.append(item)
    return version, items
