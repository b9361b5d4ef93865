"""Fixtures for the metadata tests: real SQLite files migrated by Alembic, a settable clock."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from store.metadata import (
    MetadataTable,
    create_metadata_engine,
    export_table,
    sqlite_database_url,
    upgrade_to_head,
)
from tests.support.postgres import postgres_database_url, postgres_server  # noqa: F401

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


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file at the head revision, migrated once and copied by each test."""
    path = tmp_path_factory.mktemp("template") / "metadata.sqlite3"
    upgrade_to_head(sqlite_database_url(path))
    # upgrade_to_head closed its engine, so the WAL is checkpointed into the file: copy is whole.
    assert not path.with_name(path.name + "-wal").exists()
    return path


def fresh_database_url(template: Path, directory: Path) -> str:
    path = directory / "metadata.sqlite3"
    shutil.copyfile(template, path)
    return sqlite_database_url(path)


@pytest.fixture
def database_url(migrated_template: Path, tmp_path: Path) -> str:
    """A migrated SQLite file of this test's own."""
    return fresh_database_url(migrated_template, tmp_path)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_metadata_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def database_snapshot(engine: Engine) -> dict[MetadataTable, Any]:
    """Every row and data version of every table, to show that a refused call wrote nothing."""
    return {table: export_table(engine=engine, table=table) for table in MetadataTable}
