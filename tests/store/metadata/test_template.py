"""The e2e launchers' migrated-database template (tests/support/metadata_template.py) is
what `twinlog serve` makes of an empty data dir: a database its migration child brought to
head, dumped schema and rows alike. A template built any other way (`create_all`, a file kept
from an older revision) would start the e2e brokers on a database no user ever has."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from store.metadata import sqlite_database_url
from store.metadata.migrate import head_revision, migrate_in_child
from store.paths import StorePaths
from tests.support.metadata_template import migrated_template, seed_metadata


def _dump(database: Path) -> list[str]:
    connection = sqlite3.connect(database)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


@pytest.mark.processes
def test_the_template_is_the_database_the_migration_child_makes(tmp_path: Path) -> None:
    served = StorePaths(tmp_path / "served").metadata_database
    served.parent.mkdir()
    assert migrate_in_child(sqlite_database_url(served))  # a child ran the migrations
    seed_metadata(tmp_path / "seeded")
    copied = StorePaths(tmp_path / "seeded").metadata_database
    assert sorted(path.name for path in copied.parent.iterdir()) == [copied.name]
    assert _dump(copied) == _dump(served) == _dump(migrated_template())
    assert f"INSERT INTO \"alembic_version\" VALUES('{head_revision()}');" in _dump(copied)
    # At head, as a second start finds it: `twinlog serve` starts no migration child for it.
    assert not migrate_in_child(sqlite_database_url(copied))


def test_a_data_dir_that_exists_is_left_as_it_is(tmp_path: Path) -> None:
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    seed_metadata(prepared)
    assert list(prepared.iterdir()) == []
