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
from store.retention import RetentionService
from store.snapshot import ExportRequest, Manifest, export_snapshot, find_snapshots
from tests.support.app import ServeFactory
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


async def test_post_snapshot_exports_incrementally(serve: ServeFactory, tmp_path: Path) -> None:
    """POST /admin/snapshots answers the manifest; the next one starts where it ended, and
    with nothing new it answers 409 problem+json."""
    async with serve() as served:
        await _produce(served, 30)
        first = await served.client.post("/admin/snapshots")
        assert first.status_code == 201, first.text
        body = first.json()
        assert body["message_count"] == 30 and body["topics"] == {"Snap": 30}
        assert Path(body["path"]).is_dir()
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


async def test_snapshot_stops_at_the_flushed_offset(serve: ServeFactory) -> None:
    """POST /admin/snapshots on an ASYNC_FLUSH broker exports only what is flushed: records
    still in the page cache (a power loss could take them) wait for the next snapshot."""
    async with serve(flush_interval_ms=600_000) as served:
        await _produce(served, 30, wait_flushed=False)
        flushed = served.broker.store.commit_log.flush()
        await _produce(served, 5, wait_flushed=False)
        assert served.broker.store.max_offset > flushed
        answer = await served.client.post("/admin/snapshots")
        assert answer.status_code == 201, answer.text
        assert answer.json()["message_count"] == 30 and answer.json()["range_to"] == flushed


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
