"""Delay offsets, data versions, and the export and import of slave sync."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from store.metadata import delay_offsets, groups, sync, topics
from store.metadata.models import (
    DataVersion,
    DelayOffset,
)
from store.metadata.store_base import MetadataStoreBase
from store.metadata.sync import TableExport
from store.metadata.versions import MetadataTable, get_data_version, get_data_versions


class SyncMixin(MetadataStoreBase):
    """Delay offsets, data versions, and the export and import of slave sync."""

    # ---- delay offsets -------------------------------------------------------------------------

    def get_delay_offset(self, *, delay_level: int) -> int | None:
        self._check_open()
        return delay_offsets.get_delay_offset(engine=self._engine, delay_level=delay_level)

    def list_delay_offsets(self) -> list[DelayOffset]:
        self._check_open()
        return delay_offsets.list_delay_offsets(engine=self._engine)

    def set_delay_offsets(self, *, offsets: Mapping[int, int]) -> int:
        """Store offsets by delay level; returns how many changed."""
        self._check_open()
        with self._write_lock:
            return delay_offsets.set_delay_offsets(
                engine=self._engine, offsets=offsets, now_ms=self._clock_ms()
            )

    # ---- data versions, export and import (slave sync) -----------------------------------------

    def data_version(self, table: MetadataTable) -> DataVersion:
        self._check_open()
        return get_data_version(engine=self._engine, table=table)

    def data_versions(self) -> dict[MetadataTable, DataVersion]:
        self._check_open()
        return get_data_versions(engine=self._engine)

    def export_table(self, table: MetadataTable) -> TableExport:
        """What a master serves a slave; consumer offsets are flushed first, so they are current."""
        self._check_open()
        with self._write_lock:
            if table is MetadataTable.CONSUMER_OFFSET:
                self.flush_consumer_offsets()
            return sync.export_table(engine=self._engine, table=table)

    def import_topics(self, export: Mapping[str, Any]) -> bool:
        """Replace the topics with a master's export when its version differs; True if applied."""
        self._check_open()
        with self._write_lock:
            applied = sync.import_topics(engine=self._engine, export=export)
            if applied:
                self._view.replace_topics(topics.list_topics(engine=self._engine))
            return applied

    def import_groups(self, export: Mapping[str, Any]) -> bool:
        self._check_open()
        with self._write_lock:
            applied = sync.import_groups(engine=self._engine, export=export)
            if applied:
                self._view.replace_groups(groups.list_groups(engine=self._engine))
            return applied

    def import_delay_offsets(self, export: Mapping[str, Any]) -> bool:
        self._check_open()
        with self._write_lock:
            return sync.import_delay_offsets(engine=self._engine, export=export)

    def merge_consumer_offsets(self, export: Mapping[str, Any]) -> int:
        """Take a master's offsets for the keys it has, keep the others; returns the count."""
        self._check_open()
        with self._write_lock:
            applied = sync.merge_consumer_offsets(engine=self._engine, export=export)
            self._offsets.put_persisted(applied)
            return len(applied)
