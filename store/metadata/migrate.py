"""Alembic migrations run from code: the broker upgrades its metadata database at start.

The Config is built here rather than read from alembic.ini, so this works from any working
directory. The migrations live in the repository's top-level `migrations/`; the built
distribution ships them as the `store.metadata.migrations` package (see pyproject.toml), so an
installed broker finds them next to this module and a checkout (or editable install) finds
them at the repository root.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

_HERE = Path(__file__).resolve().parent
# An installed distribution first, then the repository root of a checkout.
MIGRATIONS_CANDIDATES = (_HERE / "migrations", _HERE.parents[1] / "migrations")
# How env.py finds what to migrate when it is run from code (see migrations/env.py).
DATABASE_URL_ATTRIBUTE = "twinlog_database_url"
CONNECTION_ATTRIBUTE = "connection"


def alembic_config(
    *, database_url: str | None = None, connection: Connection | None = None
) -> Config:
    """An Alembic Config for the twinlog migrations, aimed at a URL or an open connection."""
    assert (database_url is None) != (connection is None), "give a URL or a connection"
    config = _scripts_config()
    if database_url is not None:
        config.attributes[DATABASE_URL_ATTRIBUTE] = database_url
    if connection is not None:
        config.attributes[CONNECTION_ATTRIBUTE] = connection
    return config


def upgrade_to_head(database_url: str) -> None:
    """Bring the database at `database_url` to the newest schema (idempotent)."""
    command.upgrade(alembic_config(database_url=database_url), "head")


def downgrade_to_base(database_url: str) -> None:
    """Undo every migration: the metadata tables are dropped, with their data."""
    command.downgrade(alembic_config(database_url=database_url), "base")


def upgrade_connection_to_head(connection: Connection) -> None:
    """Upgrade through an open connection (an in-memory SQLite database has no other way in)."""
    command.upgrade(alembic_config(connection=connection), "head")


def head_revision() -> str:
    """The newest revision id in migrations/versions."""
    head = ScriptDirectory.from_config(_scripts_config()).get_current_head()
    assert head is not None
    return head


def migrations_directory() -> Path:
    """Where the Alembic environment (env.py, versions/) of this installation is."""
    for candidate in MIGRATIONS_CANDIDATES:
        if (candidate / "env.py").is_file():
            return candidate
    searched = ", ".join(str(candidate) for candidate in MIGRATIONS_CANDIDATES)
    raise FileNotFoundError(f"Alembic migrations not found (searched {searched})")


def _scripts_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    return config
