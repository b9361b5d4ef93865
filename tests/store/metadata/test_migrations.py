"""Alembic migrations: up, down and up again, and the models match the migrations exactly."""

from __future__ import annotations

import configparser
import re
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlmodel import SQLModel

from store.metadata import (
    MetadataTable,
    create_metadata_engine,
    downgrade_to_base,
    head_revision,
    sqlite_database_url,
    upgrade_to_head,
)
from store.metadata.migrate import alembic_config, migrations_directory

REPOSITORY_ROOT = Path(__file__).resolve().parents[3]
METADATA_TABLES = {table.value for table in MetadataTable} | {"data_version", "log_position"}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.processes)])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a new SQLite file, or a new PostgreSQL database (skipped if none)."""
    if request.param == "sqlite":
        yield sqlite_database_url(tmp_path / "metadata.sqlite3")
    else:
        yield request.getfixturevalue("postgres_database_url")


def _table_names(database_url: str) -> set[str]:
    engine = create_metadata_engine(database_url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _current_revision(database_url: str) -> str | None:
    engine = create_metadata_engine(database_url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(empty_database_url: str) -> None:
    """From empty to head creates every table; down to base drops them; up again works."""
    url = empty_database_url
    upgrade_to_head(url)
    assert _table_names(url) == METADATA_TABLES | {"alembic_version"}
    assert _current_revision(url) == head_revision()
    downgrade_to_base(url)
    assert _table_names(url) == {"alembic_version"}
    assert _current_revision(url) is None
    upgrade_to_head(url)
    upgrade_to_head(url)  # At head already: nothing to do, no error.
    assert _table_names(url) == METADATA_TABLES | {"alembic_version"}
    assert _current_revision(url) == head_revision()


def test_initial_revision_seeds_data_versions(empty_database_url: str) -> None:
    """Each versioned table starts with a data_version row at counter 0."""
    upgrade_to_head(empty_database_url)
    engine = create_metadata_engine(empty_database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT table_name, counter, timestamp_ms FROM data_version")
            ).all()
    finally:
        engine.dispose()
    assert sorted(tuple(row) for row in rows) == sorted(
        (table.value, 0, 0) for table in MetadataTable
    )


def test_models_match_migrations(empty_database_url: str) -> None:
    """Autogenerate finds no difference between the SQLModel tables and the schema at head."""
    upgrade_to_head(empty_database_url)
    engine = create_metadata_engine(empty_database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            differences = compare_metadata(context, SQLModel.metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_upgrade_works_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """upgrade_to_head finds the migrations relative to the package, not the working directory."""
    monkeypatch.chdir(tmp_path)
    url = sqlite_database_url(tmp_path / "data" / "nested" / "metadata.sqlite3")
    upgrade_to_head(url)
    assert _current_revision(url) == head_revision()


def test_env_takes_url_from_x_argument_then_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """env.py takes the URL from `-x url=` first, then from TWINLOG_DATABASE_URL."""
    from_x = sqlite_database_url(tmp_path / "x.sqlite3")
    from_environment = sqlite_database_url(tmp_path / "environment.sqlite3")
    monkeypatch.setenv("TWINLOG_DATABASE_URL", from_environment)
    # No ini file: env.py then leaves the test run's logging alone.
    config = Config(cmd_opts=Namespace(x=[f"url={from_x}"]))
    config.set_main_option("script_location", str(migrations_directory()))
    command.upgrade(config, "head")
    assert _current_revision(from_x) == head_revision()
    assert not (tmp_path / "environment.sqlite3").exists()
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    command.upgrade(config, "head")
    assert _current_revision(from_environment) == head_revision()


def test_alembic_ini_and_revision_file_names() -> None:
    """alembic.ini points at migrations/, and every revision file is named <rev>_<slug>.py."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPOSITORY_ROOT / "alembic.ini")
    assert ini["alembic"]["script_location"] == "migrations"
    assert migrations_directory() == REPOSITORY_ROOT / "migrations"
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    scripts = list(ScriptDirectory.from_config(config).walk_revisions())
    assert scripts, "no revisions"
    for script in scripts:
        assert script.path is not None
        assert re.fullmatch(rf"{script.revision}_[a-z0-9_]+\.py", Path(script.path).name)


def test_the_group_backoff_column_keeps_existing_groups(empty_database_url: str) -> None:
    """A group stored before the backoff column exists gets "" (the broker's default) when
    the column comes, and keeps its other fields when the column goes again."""
    url = empty_database_url
    config = alembic_config(database_url=url)
    command.upgrade(config, "7d2c5e1f0a86")
    engine = create_metadata_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO subscription_group (name, consume_enabled, broadcast_enabled, "
                "retry_queue_count, retry_times_max, created_at_ms, updated_at_ms) "
                "VALUES ('old', true, false, 1, 5, 7, 8)"))
        command.upgrade(config, "head")
        with engine.connect() as connection:
            assert connection.execute(text(
                "SELECT name, retry_times_max, backoff FROM subscription_group")).all() == [
                ("old", 5, "")]
        command.downgrade(config, "7d2c5e1f0a86")
        assert "backoff" not in {column["name"] for column in
                                 inspect(engine).get_columns("subscription_group")}
        with engine.connect() as connection:
            assert connection.execute(text(
                "SELECT name, retry_times_max FROM subscription_group")).all() == [("old", 5)]
    finally:
        engine.dispose()


def test_the_group_fifo_column_keeps_existing_groups(empty_database_url: str) -> None:
    """A group stored before the fifo column exists is not FIFO when the column comes (its
    backoff and other fields kept), and keeps its fields when the column goes again."""
    url = empty_database_url
    config = alembic_config(database_url=url)
    command.upgrade(config, "7c4d2e91a5b3")
    engine = create_metadata_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO subscription_group (name, consume_enabled, broadcast_enabled, "
                "retry_queue_count, retry_times_max, created_at_ms, updated_at_ms, backoff) "
                "VALUES ('old', true, false, 1, 5, 7, 8, 'table')"))
        command.upgrade(config, "head")
        with engine.connect() as connection:
            assert connection.execute(text(
                "SELECT name, retry_times_max, backoff, fifo FROM subscription_group")
            ).all() == [("old", 5, "table", False)]
        command.downgrade(config, "7c4d2e91a5b3")
        assert "fifo" not in {column["name"] for column in
                              inspect(engine).get_columns("subscription_group")}
        with engine.connect() as connection:
            assert connection.execute(text(
                "SELECT name, retry_times_max, backoff FROM subscription_group")).all() == [
                ("old", 5, "table")]
    finally:
        engine.dispose()
