"""Fixtures for the metadata tests: real SQLite files migrated by Alembic, a settable clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from store.metadata import (
    create_metadata_engine,
    sqlite_database_url,
    upgrade_to_head,
)
from tests.support.metadata import FakeClock, fresh_database_url
from tests.support.postgres import postgres_database_url, postgres_server  # noqa: F401


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file at the head revision, migrated once and copied by each test."""
    path = tmp_path_factory.mktemp("template") / "metadata.sqlite3"
    upgrade_to_head(sqlite_database_url(path))
    # upgrade_to_head closed its engine, so the WAL is checkpointed into the file: copy is whole.
    assert not path.with_name(path.name + "-wal").exists()
    return path


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
