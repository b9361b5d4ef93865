"""A throwaway PostgreSQL server for tests: one cluster per session, one database per test.

The server binaries come from the OS (scripts/install_postgres.sh); when they or the psycopg
driver are missing, tests that need the server skip with the reason (or fail, when
TWINLOG_REQUIRE_POSTGRES=1 says the run needs them, as in CI). The cluster lives in a
temporary directory, listens only on a Unix socket in that directory (no TCP port to find
free, so none another process could take first), trusts local connections and runs with fsync
off: it holds nothing worth keeping, and tests stay fast.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVER_USER = (
    "postgres"  # Who runs the server when the tests run as root (PostgreSQL refuses root).
)
DATABASE_USER = "twinlog"
START_TIMEOUT_S = 30
REQUIRE_POSTGRES_ENV = "TWINLOG_REQUIRE_POSTGRES"


# Names the socket file (.s.PGSQL.<port>) in the cluster's own directory: not a TCP port.
SOCKET_PORT = 5432


@dataclass(frozen=True)
class PostgresServer:
    socket_directory: Path
    bin_directory: Path

    def url(self, database: str) -> str:
        return (f"postgresql+psycopg://{DATABASE_USER}@/{database}"
                f"?host={self.socket_directory}&port={SOCKET_PORT}")

    def create_database(self) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"test_{uuid.uuid4().hex[:12]}"
        admin_url = (f"postgresql://{DATABASE_USER}@/postgres?host={self.socket_directory}"
                     f"&port={SOCKET_PORT}")
        with psycopg.connect(admin_url, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def find_postgres_bin_directory() -> Path | None:
    """Where initdb and pg_ctl are: on PATH, or Debian's /usr/lib/postgresql/<version>/bin."""
    on_path = shutil.which("initdb")
    if on_path is not None and shutil.which("pg_ctl") is not None:
        return Path(on_path).parent
    candidates = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not candidates:
        return None
    newest = max(candidates, key=lambda path: int(Path(path).parts[-3]))
    return Path(newest).parent


def unavailable_reason() -> str | None:
    """Why no server can be started here, or None when one can."""
    if importlib.util.find_spec("psycopg") is None:
        return "the psycopg driver is not installed (pip install 'psycopg[binary]')"
    if find_postgres_bin_directory() is None:
        return "PostgreSQL server binaries not found (run scripts/install_postgres.sh)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no {SERVER_USER!r} user to run the server"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", SERVER_USER, "--", *command]
    return command


def _run(command: list[str]) -> None:
    completed = subprocess.run(
        _as_server_user(command), capture_output=True, text=True, timeout=START_TIMEOUT_S
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({completed.returncode}):\n{completed.stdout}"
            f"\n{completed.stderr}"
        )


@contextlib.contextmanager
def running_postgres_server() -> Iterator[PostgresServer]:
    """initdb + pg_ctl start in a temporary directory; stopped and removed on exit."""
    bin_directory = find_postgres_bin_directory()
    assert bin_directory is not None
    # Not pytest's tmp_path: its parents are private to root, and the server user must enter.
    root = Path(tempfile.mkdtemp(prefix="twinlog-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(root, user=SERVER_USER)
    data_directory = root / "data"
    try:
        _run(
            [
                str(bin_directory / "initdb"),
                "--pgdata", str(data_directory),
                "--username", DATABASE_USER,
                "--auth", "trust",
                "--encoding", "UTF8",
                "--no-sync",
            ]
        )  # fmt: skip
        options = (
            f"-c listen_addresses='' -c port={SOCKET_PORT} -c unix_socket_directories={root}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        _run(
            [
                str(bin_directory / "pg_ctl"),
                "--pgdata", str(data_directory),
                "--log", str(root / "server.log"),
                "--options", options,
                "--wait", "--timeout", str(START_TIMEOUT_S),
                "start",
            ]
        )  # fmt: skip
        try:
            yield PostgresServer(socket_directory=root, bin_directory=bin_directory)
        finally:
            _run(
                [
                    str(bin_directory / "pg_ctl"),
                    "--pgdata", str(data_directory),
                    "--mode", "fast",
                    "--wait",
                    "stop",
                ]
            )  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


def skip_unless_required(reason: str) -> None:
    """Skip with `reason`; but fail when the run requires PostgreSQL (CI sets
    REQUIRE_POSTGRES_ENV=1), so that a broken install cannot pass as a green run."""
    if os.environ.get(REQUIRE_POSTGRES_ENV) == "1":
        pytest.fail(f"{REQUIRE_POSTGRES_ENV}=1 but no PostgreSQL server: {reason}",
                    pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL cluster for the whole session; skips when none can be started."""
    reason = unavailable_reason()
    if reason is not None:
        skip_unless_required(reason)
    with running_postgres_server() as server:
        yield server


@pytest.fixture
def postgres_database_url(postgres_server: PostgresServer) -> str:
    """The URL of a fresh, empty database on the session's server."""
    return postgres_server.create_database()
