from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.snapshots import Snapshots
from store.snapshot import find_snapshots
from tests.app.conftest import ServeFactory

pytestmark = pytest.mark.anyio


async def _produce(served: object, count: int) -> None:
    client = served.client  # type: ignore[attr-defined]
    for index in range(count):
        response = await client.post("/v1/topics/Snap/messages",
                                     json={"body": f"m{index}", "keys": [f"k{index % 3}"]})
        assert response.status_code in (201, 202), response.text


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
        while not started.is_set():
            await asyncio.sleep(0.01)
        busy = await served.client.post("/admin/snapshots")
        release.set()
        assert busy.status_code == 409 and busy.json()["error_code"] == "SNAPSHOT_RUNNING"
        assert (await running).status_code == 201


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
        [sys.executable, "-m", "app.cli", "export", "--data-dir", str(tmp_path / "data"),
         "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["message_count"] == 40
    again = subprocess.run(
        [sys.executable, "-m", "app.cli", "export", "--data-dir", str(tmp_path / "data"),
         "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "no records" in again.stderr
