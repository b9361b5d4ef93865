"""The PostgreSQL test fixture says why it skips when a server cannot be started, and fails
instead when the run requires PostgreSQL."""

from __future__ import annotations

import glob
import importlib.util
import shutil

import pytest

from tests.support import postgres


def test_missing_binaries_give_a_skip_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without initdb on PATH or under /usr/lib/postgresql the reason names the install script."""
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is missing, which is reported first")
    reason = postgres.unavailable_reason()
    assert reason is not None and "scripts/install_postgres.sh" in reason


def test_missing_driver_gives_a_skip_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the psycopg driver the reason says which package to install."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    reason = postgres.unavailable_reason()
    assert reason is not None and "psycopg[binary]" in reason


def test_newest_server_version_is_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """With several Debian server versions installed, the newest one's binaries are used."""
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(
        glob,
        "glob",
        lambda pattern: ["/usr/lib/postgresql/9/bin/initdb", "/usr/lib/postgresql/15/bin/initdb"],
    )
    assert str(postgres.find_postgres_bin_directory()) == "/usr/lib/postgresql/15/bin"


def test_missing_server_skips_when_not_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without TWINLOG_REQUIRE_POSTGRES a missing server is a skip with its reason."""
    monkeypatch.delenv(postgres.REQUIRE_POSTGRES_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no initdb"):
        postgres.skip_unless_required("no initdb")


def test_missing_server_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """With TWINLOG_REQUIRE_POSTGRES=1 (CI) a missing server fails the test, naming why."""
    monkeypatch.setenv(postgres.REQUIRE_POSTGRES_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="no initdb"):
        postgres.skip_unless_required("no initdb")
