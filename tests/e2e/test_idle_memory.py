"""A served broker loads what only snapshots, migrations or the CLI need when they run, not at
start (issue 31; bench/idle_memory.py measures what that saves): pyarrow and numpy are not
mapped into a master that took puts, until its first snapshot; a broker started as `twinlog
serve` starts it (its database migrated by a child process) holds no Alembic, no httpx (a
master), no pyarrow, no numpy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.brokers import ROOT, Launcher

pytestmark = [pytest.mark.processes, pytest.mark.slow]

NATIVE_LOADED_WHEN_USED = ("pyarrow", "numpy")
# What a started master must not have imported (the snapshot export, the key index's check of
# entries it does not have, Alembic, httpx and its command line).
NOT_AT_START = ("alembic", "mako", "pyarrow", "numpy", "isal", "httpx", "rich", "click")


def _mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_snapshot_libraries_load_with_the_first_snapshot(launch: Launcher) -> None:
    master = launch("memory-master", "ASYNC_MASTER")
    assert master.process is not None
    for index in range(3):
        answer = master.client.post("/v1/topics/Idle/messages", json={"body": f"m {index}"})
        assert answer.status_code == 201, answer.text
    maps = _mapped(master.process.pid)
    loaded = [name for name in NATIVE_LOADED_WHEN_USED if f"/{name}/" in maps]
    assert loaded == [], f"a master that only took puts has {loaded} mapped"
    snapshot = master.client.post("/admin/snapshots", timeout=60)
    assert snapshot.status_code == 201, snapshot.text
    assert "/pyarrow/" in _mapped(master.process.pid)


_STARTED_BROKER = """
import json, sys
from pathlib import Path
from app.broker.broker import Broker
from app.settings import load_settings
from store.metadata.migrate import migrate_in_child

settings = load_settings(None, broker_role="ASYNC_MASTER", data_dir=Path(sys.argv[1]),
                         ha_secret="memory-test-secret", ha_listen_port=0)
migrated = [migrate_in_child(settings.metadata_database_url)]
broker = Broker(settings)
broker.start()
try:
    loaded = sorted(name for name in sys.argv[2:] if name in sys.modules)
finally:
    broker.stop()
migrated.append(migrate_in_child(settings.metadata_database_url))
print(json.dumps({"loaded": loaded, "migrated": migrated}))
"""


def test_a_started_broker_holds_no_migration_snapshot_or_client_library(tmp_path: Path) -> None:
    """As `twinlog serve` starts one: the database migrated by a child (once: the second time
    it is at head and no child runs), then the broker started, in a Python process of its own."""
    result = subprocess.run(
        [sys.executable, "-c", _STARTED_BROKER, str(tmp_path / "data"), *NOT_AT_START],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    assert printed == {"loaded": [], "migrated": [True, False]}


def test_serve_refuses_a_database_it_cannot_migrate(tmp_path: Path) -> None:
    """A migration that fails in the child stops `twinlog serve` with exit 2 and the child's
    last words, before the broker starts."""
    database = tmp_path / "metadata.sqlite3"
    database.write_bytes(b"not a database" * 100)
    result = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "serve", "--data-dir", str(tmp_path / "data"),
         "--http-port", "0", "--ha-port", "0", "--set", "ha_secret=memory-test-secret",
         "--set", f"database_url=sqlite:///{database}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the metadata database could not be migrated" in result.stderr
    assert "file is not a database" in result.stderr


def test_the_served_master_answers_puts(launch: Launcher) -> None:
    """A broker whose database a child migrated serves as before (a restart finds it at head)."""
    master = launch("memory-restart", "ASYNC_MASTER")
    assert httpx.post(f"{master.url}/v1/topics/T/messages", json={"body": "a"}).status_code == 201
    master.stop()
    master.start()
    assert httpx.post(f"{master.url}/v1/topics/T/messages", json={"body": "b"}).status_code == 201
