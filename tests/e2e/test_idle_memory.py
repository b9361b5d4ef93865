"""A served broker loads what only snapshots, migrations, the CLI or the other replication mode
need when they run, not at start (issue 31; bench/idle_memory.py measures what that saves):
each broker of the `make run` pair idles within 100 MB resident after three puts; pyarrow and
numpy are not mapped into a master that took puts, until its first snapshot; a broker started
as `twinlog serve` starts it (its database migrated by a child process), master or slave, holds
no Alembic, no httpx, no pyarrow, no numpy and no DLedger member."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.brokers import ROOT, Launcher
from tests.support.dev_pair import idle_rss_bytes, running_dev_pair
from tests.support.ports import refused_port

pytestmark = [pytest.mark.processes, pytest.mark.slow]

IDLE_RSS_MAX_BYTES = 100_000_000  # issue 31's target, for each broker of the pair
NATIVE_LOADED_WHEN_USED = ("pyarrow", "numpy")
# What a started broker must not have imported (the snapshot export, the key index's check of
# entries it does not have, Alembic, an HTTP client library and its command line, a DLedger
# member's host, stored log and node).
NOT_AT_START = ("alembic", "mako", "pyarrow", "numpy", "isal", "httpx", "httpcore", "h11", "rich",
                "click", "ha.dledger.commit_log", "ha.dledger.host.host", "ha.dledger.host.server",
                "ha.dledger.stored.stored_log", "ha.dledger.core.node")


def test_each_broker_of_the_make_run_pair_idles_within_100_mb(tmp_path: Path) -> None:
    """`twinlog dev` (what `make run` starts), measured as bench/idle_memory.py does: three
    puts to the master, 3 s of idle, then the VmRSS of the master and of the slave."""
    with running_dev_pair(tmp_path) as pair:
        resident = idle_rss_bytes(pair)
        # No WebSocket library (the broker serves none): its native part would be mapped.
        assert [role for role, pid in pair.pids.items() if "/websockets/" in _mapped(pid)] == []
    assert set(resident) == {"master", "slave"}
    over = {role: f"{size / 1e6:.1f} MB" for role, size in resident.items()
            if size > IDLE_RSS_MAX_BYTES}
    assert over == {}, f"over {IDLE_RSS_MAX_BYTES / 1e6:.0f} MB idle: {over}"


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
import json, sys, time
from pathlib import Path
from app.api.main import create_app
from app.broker.broker import Broker
from app.settings import load_settings
from store.metadata.migrate import migrate_in_child

role, refused_port = sys.argv[2], int(sys.argv[3])
# A slave's master refuses: its HA link and its metadata sync keep retrying.
slave = {"ha_master_address": f"127.0.0.1:{refused_port}",
         "master_http_address": f"http://127.0.0.1:{refused_port}",
         "ha_reconnect_interval_ms": 60_000} if role == "SLAVE" else {}
settings = load_settings(None, broker_role=role, data_dir=Path(sys.argv[1]),
                         ha_secret="memory-test-secret", ha_listen_port=0, **slave)
migrated = [migrate_in_child(settings.metadata_database_url)]
create_app(settings)
broker = Broker(settings)
broker.start()
try:
    deadline = time.monotonic() + 30
    while broker.slave_sync is not None and broker.slave_sync.state.consecutive_failures == 0:
        assert time.monotonic() < deadline, "a slave's first pull did not fail"
        time.sleep(0.01)  # until its first pull has been tried (and refused)
    loaded = sorted(name for name in sys.argv[4:] if name in sys.modules)
finally:
    broker.stop()
migrated.append(migrate_in_child(settings.metadata_database_url))
print(json.dumps({"loaded": loaded, "migrated": migrated}))
"""


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SLAVE"])
def test_a_started_broker_holds_no_migration_snapshot_client_or_dledger_library(
        tmp_path: Path, role: str) -> None:
    """As `twinlog serve` starts one: the database migrated by a child (once: the second time
    it is at head and no child runs), its app built, then the broker started, in a Python
    process of its own; a slave once its metadata sync has tried a pull."""
    with refused_port() as port:
        result = subprocess.run(
            [sys.executable, "-c", _STARTED_BROKER, str(tmp_path / "data"), role, str(port),
             *NOT_AT_START], cwd=ROOT, capture_output=True, text=True, timeout=120)
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
