"""Alembic environment for the twinlog metadata database.

Where the database is, first match wins: an open connection or a URL that code put in
`config.attributes` (store.metadata.migrate), `-x url=...` on the alembic command line, the
TWINLOG_DATABASE_URL environment variable, else the SQLite file data/metadata.sqlite3.
"""

from __future__ import annotations

import os
from logging.config import fileConfig
from pathlib import Path

from alembic import context
from sqlalchemy import Connection
from sqlmodel import SQLModel

import store.metadata.models  # noqa: F401  (registers every table on SQLModel.metadata)
from store.metadata.database import (
    DATABASE_FILE_NAME,
    create_metadata_engine,
    is_sqlite,
    sqlite_database_url,
)
from store.metadata.migrate import CONNECTION_ATTRIBUTE, DATABASE_URL_ATTRIBUTE

DATABASE_URL_ENVIRONMENT_VARIABLE = "TWINLOG_DATABASE_URL"
DEFAULT_DATABASE_URL = sqlite_database_url(Path("data") / DATABASE_FILE_NAME)

config = context.config
# Only the alembic command line has an ini file; when the broker migrates, its logging stays.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = SQLModel.metadata


def database_url() -> str:
    from_code = config.attributes.get(DATABASE_URL_ATTRIBUTE)
    if from_code:
        return str(from_code)
    from_command_line = context.get_x_argument(as_dictionary=True).get("url")
    if from_command_line:
        return from_command_line
    return os.environ.get(DATABASE_URL_ENVIRONMENT_VARIABLE) or DEFAULT_DATABASE_URL


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite can hardly ALTER a table; batch mode rebuilds it when a migration must.
        render_as_batch=is_sqlite(connection.engine.url),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Print the SQL instead of running it (`alembic upgrade head --sql`)."""
    url = database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=is_sqlite(url),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get(CONNECTION_ATTRIBUTE)
    if connection is not None:
        run_migrations(connection)
        return
    engine = create_metadata_engine(database_url())
    try:
        with engine.connect() as connection:
            run_migrations(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
