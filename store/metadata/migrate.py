"""Alembic migrations run from code: the broker upgrades its metadata database at start.

The Config is built here rather than read from alembic.ini, so this works from any working
directory. The migrations live in the repository's top-level `migrations/`; the built
distribution ships them as the `store.metadata.migrations` package (see pyproject.toml), so an
installed broker finds them next to this module and a checkout (or editable install) finds
them at the repository root.

Alembic (some 10 MB of a process) loads only to migrate: a store whose database is at the
newest revision already never loads it. `twinlog serve` brings the database there first in a
short-lived child process (`migrate_in_child`, `python -m store.metadata.migrate URL`), so a
served broker never holds Alembic, its first start included.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

if TYPE_CHECKING:
    from alembic.config import Config

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
    from alembic import command

    command.upgrade(alembic_config(database_url=database_url), "head")


def downgrade_to_base(database_url: str) -> None:
    """Undo every migration: the metadata tables are dropped, with their data."""
    from alembic import command

    command.downgrade(alembic_config(database_url=database_url), "base")


def upgrade_connection_to_head(connection: Connection) -> None:
    """Upgrade through an open connection (an in-memory SQLite database has no other way in)."""
    from alembic import command

    command.upgrade(alembic_config(connection=connection), "head")


class MigrationFailed(Exception):
    """The child process that migrates the database failed; the message is its last words."""


def bring_to_head(connection: Connection) -> None:
    """The database at the newest schema, Alembic loaded only if there is work."""
    if current_revision(connection) != head_revision():
        with connection.begin():
            upgrade_connection_to_head(connection)


MIGRATION_TIMEOUT_S = 300.0


def migrate_in_child(database_url: str) -> bool:
    """Bring the database at `database_url` to head in a child process, so that this process
    never loads Alembic; False when it was there already (no child started). Raises
    MigrationFailed with the child's last line."""
    from store.metadata.database import create_metadata_engine

    engine = create_metadata_engine(database_url)
    try:
        with engine.connect() as connection:
            if current_revision(connection) == head_revision():
                return False
    except SQLAlchemyError as error:
        raise MigrationFailed(str(error.orig) if isinstance(error, DBAPIError) else str(error)
                              ) from error
    finally:
        engine.dispose()
    result = subprocess.run([sys.executable, "-m", "store.metadata.migrate", database_url],
                            capture_output=True, text=True, timeout=MIGRATION_TIMEOUT_S)
    if result.returncode != 0:
        words = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise MigrationFailed(words[-1] if words else f"exit {result.returncode}")
    return True


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at (None: never migrated), read without Alembic."""
    try:
        if not inspect(connection).has_table("alembic_version"):
            return None
        rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    finally:
        connection.rollback()  # no read transaction left open while a child migrates
    return str(rows[0][0]) if len(rows) == 1 else None


def head_revision() -> str:
    """The newest revision id in migrations/versions: the one no other revision follows,
    read from the files' `revision` and `down_revision` (without Alembic)."""
    revisions: dict[str, object] = {}
    for path in sorted((migrations_directory() / "versions").glob("*.py")):
        module = ast.parse(path.read_text(encoding="utf-8"))
        values = {}
        for node in module.body:
            if isinstance(node, ast.AnnAssign | ast.Assign):
                targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
                for target in targets:
                    if isinstance(target, ast.Name) and node.value is not None:
                        values[target.id] = ast.literal_eval(node.value)
        revisions[str(values["revision"])] = values.get("down_revision")
    followed = {down for down in revisions.values() if isinstance(down, str)}
    heads = sorted(set(revisions) - followed)
    assert len(heads) == 1, f"the migrations have {len(heads)} heads: {heads}"
    return heads[0]


def migrations_directory() -> Path:
    """Where the Alembic environment (env.py, versions/) of this installation is."""
    for candidate in MIGRATIONS_CANDIDATES:
        if (candidate / "env.py").is_file():
            return candidate
    searched = ", ".join(str(candidate) for candidate in MIGRATIONS_CANDIDATES)
    raise FileNotFoundError(f"Alembic migrations not found (searched {searched})")


def _scripts_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    return config


if __name__ == "__main__":
    # bring_to_head's child: migrate the database named and exit (0: at head).
    upgrade_to_head(sys.argv[1])
