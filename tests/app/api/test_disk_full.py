"""A full disk over HTTP (issue 9, item 2): the produce that needs a new commit-log file
answers 507 CREATE_MAPPED_FILE_FAILED, reads go on, and produces succeed again by themselves
once space is back. The broker's data dir is a real 16 MiB tmpfs (skipped where mounting is
not permitted); its metadata database lives outside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.metadata import sqlite_database_url
from tests.support.app import ServeFactory, problem
from tests.support.small_fs import fill, small_fs
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio

RAW = {"content-type": "application/octet-stream"}
URL = "/v1/topics/Full/messages?queue_id=0"
PRODUCES_MAX = 400  # 400 x 2 KB: far more than a full file system takes


async def test_full_disk_answers_507_and_recovers_by_itself(
    serve: ServeFactory, tmp_path: Path
) -> None:
    """507 with the ENOSPC reason when a new file cannot be allocated; the messages stored
    before stay readable; 201 again once the space is back, without a restart."""
    # 16 MiB: room for the log files, the key index and the queues' first 16 KiB steps.
    with small_fs(tmp_path / "fs", size_bytes=16 << 20) as fs:
        settings = {"data_dir": fs / "broker", "mapped_file_size_bytes": 64 * 1024,
                    "disk_reserve_bytes": 0,  # the disk's own ENOSPC
                    "database_url": sqlite_database_url(tmp_path / "metadata.sqlite3")}
        async with serve(**settings) as served:
            first = await served.client.post(URL, content=b"first", headers=RAW)
            assert first.status_code == 201, first.text
            wait_dispatched(served.broker.store)
            filler = fill(fs)
            for _ in range(PRODUCES_MAX):
                answer = await served.client.post(URL, content=bytes(2000), headers=RAW)
                if answer.status_code != 201:
                    break
            assert answer.status_code == 507, answer.text
            body = problem(answer)
            assert body["put_status"] == "CREATE_MAPPED_FILE_FAILED"
            assert "No space left" in body["detail"]
            read = await served.client.get("/v1/topics/Full/queues/0/messages",
                                           params={"offset": 0, "max_messages": 1})
            assert read.status_code == 200 and len(read.json()["messages"]) == 1
            filler.unlink()
            again = await served.client.post(URL, content=b"again", headers=RAW)
            assert again.status_code == 201, again.text
