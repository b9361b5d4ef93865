"""Engines for the metadata database: SQLite settings and URLs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import text

from store.metadata import DATABASE_FILE_NAME, create_metadata_engine, sqlite_database_url


def test_sqlite_engine_uses_wal_foreign_keys_and_creates_the_directory(tmp_path: Path) -> None:
    """A SQLite file in a new data dir is created, in WAL mode, with foreign keys enforced."""
    path = tmp_path / "new" / "data" / DATABASE_FILE_NAME
    engine = create_metadata_engine(sqlite_database_url(path))
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 5000
    finally:
        engine.dispose()
    assert path.is_file()


def test_transactions_are_real_sqlite_transactions(tmp_path: Path) -> None:
    """A read-only transaction is a real SQLite transaction, not the driver's autocommit."""
    engine = create_metadata_engine(sqlite_database_url(tmp_path / DATABASE_FILE_NAME))
    try:
        with engine.begin() as connection:
            assert connection.exec_driver_sql("SELECT 1").scalar() == 1
            dbapi_connection = connection.connection.dbapi_connection
            assert isinstance(dbapi_connection, sqlite3.Connection)
            assert dbapi_connection.in_transaction
    finally:
        engine.dispose()
