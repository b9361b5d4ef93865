from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import app.broker.snapshots
from app.broker.snapshots import Snapshots
from store import Message
from store.broker_file import BrokerFile, read_broker_file
from store.paths import StorePaths
from store.retention import RetentionService
from store.snapshot import ExportRequest, Manifest, export_snapshot, find_snapshots
from tests.support.app import ServeFactory
from tests.support.stalled_flush import stalled_flush
from tests.support.store import wait_until

pytestmark = pytest.mark.anyio

STARTED_TIMEOUT_S = 10.0


async def _produce(served: object, count: int, *, wait_flushed: bool = True) -> None:
    client = served.client  # type: ignore[attr-defined]
    for index in range(count):
        response = await client.post("/v1/topics/Snap/messages",
                                     json={"body": f"m{index}", "keys": [f"k{index % 3}"]})
        assert response.status_code in (201, 202), response.text
    store = served.broker.store  # type: ignore[attr-defined]
    # Snapshots stop at the flushed offset: wait for the periodic flush to pass these.
    if wait_flushed:
        wait_until(lambda: store.commit_log.flushed_offset == store.max_offset)


async def test_post_snapshot_exports_incrementally(serve: ServeFactory, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """POST /admin/snapshots answers the manifest, its `path` absolute even when the data
    dir was given relative to the broker's working directory; the next one starts where it
    ended, and with nothing new it answers 409 problem+json."""
    monkeypatch.chdir(tmp_path)
    async with serve(data_dir=Path("relative-data")) as served:
        await _produce(served, 30)
        first = await served.client.post("/admin/snapshots")
        assert first.status_code == 201, first.text
        body = first.json()
        assert body["message_count"] == 30 and body["topics"] == {"Snap": 30}
        assert Path(body["path"]).is_absolute() and Path(body["path"]).is_dir()
        assert Path(body["path"]).parent == tmp_path / "relative-data" / "snapshots"
        assert "consumer_offset" in body["metadata_rows"]
        nothing = await served.client.post("/admin/snapshots")
        assert nothing.status_code == 409
        assert nothing.headers["content-type"].startswith("application/problem+json")
        await _produce(served, 5)
        second = (await served.client.post("/admin/snapshots")).json()
        assert second["range_from"] == body["range_to"] and second["message_count"] == 5
        root = served.broker.settings.snapshot_root
        assert len(find_snapshots(root)) == 2


async def test_second_export_while_one_runs_is_409(serve: ServeFactory,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """While an export runs, another request is refused with 409 at once."""
    async with serve() as served:
        await _produce(served, 10)
        snapshots = served.app.state.gateway.snapshots
        assert isinstance(snapshots, Snapshots)
        release = threading.Event()
        started = threading.Event()
        original = snapshots._export_locked

        def slow() -> object:
            started.set()
            release.wait(10)
            return original()

        monkeypatch.setattr(snapshots, "_export_locked", slow)
        running = asyncio.create_task(served.client.post("/admin/snapshots"))
        deadline = time.monotonic() + STARTED_TIMEOUT_S
        while not started.is_set():
            assert time.monotonic() < deadline, "the export did not start"
            await asyncio.sleep(0.01)
        busy = await served.client.post("/admin/snapshots")
        release.set()
        assert busy.status_code == 409 and busy.json()["error_code"] == "SNAPSHOT_RUNNING"
        assert (await running).status_code == 201


@pytest.mark.processes
def test_export_command_on_a_stopped_broker(tmp_path: Path) -> None:
    """`twinlog export --data-dir ... --out ...` works on a stopped broker's files."""
    from store import Message, MessageStore, StoreConfig

    store = MessageStore(StoreConfig(data_dir=tmp_path / "data",
                                     mapped_file_size_bytes=64 * 1024,
                                     message_size_max_bytes=16 * 1024))
    store.start()
    for index in range(40):
        store.put_message(Message("Cli", b"x" * index))
    store.shutdown()
    result = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "export", "--data-dir", str(tmp_path / "data"),
         "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["message_count"] == 40
    again = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "export", "--data-dir", str(tmp_path / "data"),
         "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "no records" in again.stderr


@pytest.mark.processes  # twinlog export in a child
async def test_export_of_a_data_dir_names_the_broker_that_ran_on_it(
        serve: ServeFactory, tmp_path: Path) -> None:
    """`twinlog export` of a stopped SYNC_MASTER's data dir wrote broker_role ASYNC_MASTER,
    broker_name 'broker': the broker now records its role, name and group in the data dir
    (broker.json) at start and at every role change, and the export writes those; flags
    still win, and a data dir without the file says what it assumes."""
    data_dir = tmp_path / "master"
    async with serve(data_dir=data_dir, broker_role="SYNC_MASTER",
                     broker_group="orders-group") as served:
        await _produce(served, 3)
        name = served.broker.name
        assert read_broker_file(data_dir) == BrokerFile(name, "SYNC_MASTER", "orders-group")
        served.broker.demote("127.0.0.1:9", "http://127.0.0.1:9")
        assert read_broker_file(data_dir) == BrokerFile(name, "SLAVE", "orders-group")

    def export(out: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "app.cli.main", "export", "--data-dir",
                               str(data_dir), "--out", str(tmp_path / out), *flags],
                              capture_output=True, text=True, timeout=120)

    done = export("recorded")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    manifest = json.loads(done.stdout)
    assert (manifest["broker_role"], manifest["broker_name"], manifest["broker_group"]) == (
        "SLAVE", name, "orders-group")  # its role when it stopped
    flagged = json.loads(export("flagged", "--broker-name", "m1", "--broker-role",
                                "SYNC_MASTER").stdout)
    assert (flagged["broker_name"], flagged["broker_role"]) == ("m1", "SYNC_MASTER")
    StorePaths(data_dir).broker_file.unlink()
    old = export("old")
    assert old.returncode == 0 and "broker.json is missing" in old.stderr
    assert json.loads(old.stdout)["broker_role"] == "ASYNC_MASTER"


async def test_a_snapshot_right_after_a_produce_holds_it(serve: ServeFactory) -> None:
    """POST /admin/snapshots right after 20 puts answered PUT_OK, on an ASYNC_FLUSH broker
    whose next flush is minutes away: the snapshot flushes them first (it answered 409
    NOTHING_TO_SNAPSHOT, "No new records since the last snapshot")."""
    async with serve(flush_interval_ms=600_000) as served:
        await _produce(served, 20, wait_flushed=False)
        store = served.broker.store
        assert store.commit_log.flushed_offset < store.max_offset
        answer = await served.client.post("/admin/snapshots")
        assert answer.status_code == 201, answer.text
        assert answer.json()["message_count"] == 20
        assert answer.json()["range_to"] == store.max_offset == store.commit_log.flushed_offset


async def test_snapshot_stops_at_the_flushed_offset(serve: ServeFactory) -> None:
    """When the flush does not finish within sync_flush_timeout_ms (a stalled disk), the
    snapshot exports only what is flushed: records still in the page cache (a power loss
    could take them) wait for the next snapshot; with nothing flushed at all the 409 says
    so, with the bytes missing."""
    async with serve(flush_interval_ms=600_000, sync_flush_timeout_ms=300) as served:
        store = served.broker.store
        with stalled_flush(store):
            await _produce(served, 3, wait_flushed=False)
            nothing = await served.client.post("/admin/snapshots")
        assert nothing.status_code == 409, nothing.text
        detail = nothing.json()["detail"]
        assert f"bytes before offset {store.max_offset} are not flushed to disk yet" in detail
        # The flush the snapshot woke goes on once the disk answers: let it end before the
        # next stall, or it would flush what that stall is meant to hold back.
        wait_until(lambda: store.commit_log.flushed_offset == store.max_offset)
        await _produce(served, 30, wait_flushed=False)
        flushed = store.commit_log.flush()
        with stalled_flush(store):
            await _produce(served, 5, wait_flushed=False)
            assert store.max_offset > flushed
            answer = await served.client.post("/admin/snapshots")
        assert answer.status_code == 201, answer.text
        assert answer.json()["message_count"] == 33 and answer.json()["range_to"] == flushed


async def test_a_sync_master_without_its_slave_says_why_nothing_is_exported(
        serve: ServeFactory) -> None:
    """A SYNC_MASTER whose puts no slave acknowledged (202 SLAVE_NOT_AVAILABLE) has nothing
    confirmed to export: the 409 names the unacknowledged bytes, not "no new records"."""
    async with serve(broker_role="SYNC_MASTER") as served:
        response = await served.client.post("/v1/topics/Snap/messages", json={"body": "m"})
        assert response.json()["status"] == "SLAVE_NOT_AVAILABLE"
        answer = await served.client.post("/admin/snapshots")
        assert answer.status_code == 409, answer.text
        assert answer.json()["error_code"] == "NOTHING_TO_SNAPSHOT"
        assert "are not acknowledged by the slaves this SYNC_MASTER needs" in answer.json()[
            "detail"]


async def test_retention_mid_export_answers_a_shorter_snapshot(
        serve: ServeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Retention removing the files ahead of a running export (run from the exporter's
    progress hook) gives 201 with a snapshot that ends at the last file read, never a 500;
    the next snapshot counts the bytes retention took in `skipped_before_bytes`."""
    async with serve(mapped_file_size_bytes=64 * 1024) as served:
        store = served.broker.store
        for index in range(300):
            store.put_message(Message("Ret", bytes([index % 251]) * 1500))
        wait_until(lambda: store.dispatch.dispatched_offset == store.max_offset
                   and store.commit_log.flushed_offset == store.max_offset)
        first_end = store.commit_log.files.files[0].end_offset
        retention = RetentionService(store.config, store.commit_log, store.queues,
                                     store.dispatch, used_ratio=lambda _: 0.99)
        removed: list[int] = []

        def export_with_retention(request: ExportRequest) -> Manifest:
            def retention_after_first_window(done_bytes: int, total_bytes: int) -> None:
                if not removed:
                    removed.append(retention.delete_expired())
            request.progress = retention_after_first_window
            return export_snapshot(request)

        monkeypatch.setattr(app.broker.snapshots, "export_snapshot", export_with_retention)
        answer = await served.client.post("/admin/snapshots")
        assert answer.status_code == 201, answer.text
        assert removed and removed[0] >= 2
        assert 0 < answer.json()["range_to"] <= first_end
        following = await served.client.post("/admin/snapshots")
        assert following.status_code == 201, following.text
        assert following.json()["range_from"] == store.min_offset
        assert following.json()["skipped_before_bytes"] > 0
