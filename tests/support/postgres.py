"""A throwaway PostgreSQL server for tests: one cluster per session, one database per test.

The server binaries come from the OS (scripts/install_postgres.sh); when they or the psycopg
driver are missing, tests that need the server skip with the reason. The cluster lives in a
temporary directory, listens on 127.0.0.1 on a free port, trusts local connections and runs
with fsync off: it holds nothing worth keeping, and tests stay fast.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import socket
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


@dataclass(frozen=True)
class PostgresServer:
    port: int
    bin_directory: Path

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{DATABASE_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"test_{uuid.uuid4().hex[:12]}"
        admin_url = f"postgresql://{DATABASE_USER}@127.0.0.1:{self.port}/postgres"
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        port: int = listener.getsockname()[1]
        return port


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
    port = _free_port()
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
            f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root}"
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
            yield PostgresServer(port=port, bin_directory=bin_directory)
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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL cluster for the whole session; skips when none can be started."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with running_postgres_server() as server:
        yield server


@pytest.fixture
def postgres_database_url(postgres_server: PostgresServer) -> str:
    """The URL of a fresh, empty database on the session's server."""
    return postgres_server.create_database()
