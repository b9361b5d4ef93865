"""Engines and transactions for the metadata database (SQLite by default, any SQLAlchemy URL)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Delete, Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, CursorResult, make_url
from sqlalchemy.pool import StaticPool
from sqlmodel import Session

DATABASE_FILE_NAME = "metadata.sqlite3"
# How long a SQLite connection waits for another writer before it gives up with "locked".
SQLITE_BUSY_TIMEOUT_MS = 5000
# The execution option read_transaction sets: its BEGIN takes no lock.
_READ_ONLY = "twinlog_read_only"


def sqlite_database_url(database_path: Path) -> str:
    """The SQLAlchemy URL of a SQLite file, e.g. `data_dir / DATABASE_FILE_NAME`."""
    return f"sqlite:///{database_path}"


def is_sqlite(url: str | URL) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _is_sqlite_in_memory(url: URL) -> bool:
    return url.database in (None, "", ":memory:")


def create_metadata_engine(database_url: str) -> Engine:
    """An engine for `database_url`; for SQLite it also sets WAL, foreign keys and transactions."""
    url = make_url(database_url)
    if not is_sqlite(url):
        return create_engine(url, pool_pre_ping=True)
    if _is_sqlite_in_memory(url):
        # Every connection to ":memory:" is a new empty database: share one across threads.
        engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        assert url.database is not None
        # SQLite cannot create the directory of its file; the data dir may be brand new.
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url)
    _configure_sqlite(engine, wal=not _is_sqlite_in_memory(url))
    return engine


def _configure_sqlite(engine: Engine, *, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        # The sqlite3 module begins transactions lazily and never for SELECT, so a read and the
        # write that depends on it could see different data. Turn its handling off and let
        # SQLAlchemy's "begin" event emit BEGIN below (SQLAlchemy's documented recipe).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            # Off by default in SQLite; on, so any foreign key a later migration adds holds.
            cursor.execute("PRAGMA foreign_keys = ON")
            if wal:
                # Readers do not block the writer; the offset persister writes every 5 s.
                cursor.execute("PRAGMA journal_mode = WAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection: Connection) -> None:
        # A transaction that writes takes the write lock at the start (IMMEDIATE), so one that
        # reads and then writes never fails half-way because another connection wrote in
        # between. One that only reads (read_transaction) takes no lock: in WAL mode it reads
        # a snapshot beside the writer, never queuing on it or making it wait.
        if connection.get_execution_options().get(_READ_ONLY, False):
            connection.exec_driver_sql("BEGIN DEFERRED")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def transaction(engine: Engine) -> Iterator[Session]:
    """A session in one transaction that may write: committed on success, rolled back on any
    exception. On SQLite it holds the write lock from its start."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        yield session


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Session]:
    """A session in one transaction that only reads: on SQLite it takes no write lock (BEGIN
    DEFERRED), so readers never queue behind a writer or each other."""
    with Session(engine.execution_options(**{_READ_ONLY: True}),
                 expire_on_commit=False) as session, session.begin():
        yield session


def execute_delete(session: Session, statement: Delete) -> int:
    """Run a DELETE in the session's transaction; returns how many rows it removed."""
    result = session.execute(statement)
    assert isinstance(result, CursorResult), type(result)
    return result.rowcount
