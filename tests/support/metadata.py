"""Metadata databases for tests: a migrated template copied per test, a fake clock, table
snapshots."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from store.metadata import (
    MetadataTable,
    export_table,
    sqlite_database_url,
)

START_MS = 1_700_000_000_000


class FakeClock:
    """A clock that moves only when told to, so times in assertions are exact."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, milliseconds: int = 1) -> int:
        self.now_ms += milliseconds
        return self.now_ms


def fresh_database_url(template: Path, directory: Path) -> str:
    path = directory / "metadata.sqlite3"
    shutil.copyfile(template, path)
    return sqlite_database_url(path)


def database_snapshot(engine: Engine) -> dict[MetadataTable, Any]:
    """Every row and data version of every table, to show that a refused call wrote nothing."""
    return {table: export_table(engine=engine, table=table) for table in MetadataTable}
