"""A fresh broker's metadata database, migrated once per test process instead of once per
broker.

`twinlog serve` on an empty data dir first brings its SQLite metadata database to the newest
schema in a child Python (`store.metadata.migrate.migrate_in_child`: Alembic and every
migration, about 1 s of CPU), and the e2e tests start a few hundred fresh brokers. The
launchers here (`tests/support/brokers.py`, `tests/support/dledger_group.py`) copy a
database this process migrated once into a data dir that does not exist yet, so the broker
finds its database at head, as it would on its second start, and starts no child. The first
start's migration stays covered where it is the subject: `tests/e2e/test_idle_memory.py`
(migrated by a child, once; a database it cannot migrate refused) and
`tests/e2e/test_wheel.py` (an installed broker migrates), whose brokers this does not touch,
and `tests/store/metadata/test_migrations.py`. `tests/store/metadata/test_template.py` checks
that the copy is what the migration child makes, schema and rows.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from store.metadata import sqlite_database_url
from store.metadata.migrate import upgrade_to_head
from store.paths import StorePaths

_made: list[Path] = []


def migrated_template() -> Path:
    """This process's migrated database (made on first use, removed at exit)."""
    if not _made:
        directory = Path(tempfile.mkdtemp(prefix="twinlog-metadata-"))
        atexit.register(shutil.rmtree, directory, True)
        database = directory / "metadata.sqlite3"
        upgrade_to_head(sqlite_database_url(database))
        _made.append(database)
    return _made[0]


def seed_metadata(data_dir: Path) -> None:
    """Give a data dir that does not exist yet a metadata database at head; a data dir that
    exists (a restart, or one a test prepared) is left as it is."""
    if data_dir.exists():
        return
    data_dir.mkdir(parents=True)
    shutil.copyfile(migrated_template(), StorePaths(data_dir).metadata_database)
