"""A real broker on a small disk (issue 26, finding 7): a put is never answered 201 unless
its consume-queue entry can be written. The review's case: a 24 MiB disk, 4 MiB commit-log
files, one topic of four queues whose 6 MB queue files could not all be created, 207 puts
answered 201 of which 104 were readable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.brokers import Launcher, read_queues
from tests.support.small_fs import small_fs

pytestmark = pytest.mark.processes

DISK_BYTES = 24 << 20
BODY_BYTES = 60 * 1024
PUTS_MAX = 1000  # about 60 MB: more than the disk holds


def test_every_201_is_readable_when_the_disk_fills(launch_own: Launcher,
                                                   tmp_path: Path) -> None:
    """Produce to four queues until the disk is full: every 201 is consumable, the refusals
    are 507 CREATE_MAPPED_FILE_FAILED problem+json, and none comes before the disk is nearly
    full (the queues reserve steps, not 6 MB files)."""
    with small_fs(tmp_path / "full", DISK_BYTES):
        broker = launch_own("full", "ASYNC_MASTER", mapped_file_size_bytes=4 << 20,
                            disk_reserve_bytes=2 << 20, disk_max_used_ratio=1.0)
        created = broker.client.post("/v1/topics", json={"name": "Full"})
        assert created.status_code == 201, created.text
        acknowledged: set[str] = set()
        refusal = None
        for index in range(PUTS_MAX):
            body = f"{index:08d}".ljust(BODY_BYTES, "x")
            answer = broker.client.post("/v1/topics/Full/messages", json={"body": body})
            if answer.status_code != 201:
                refusal = answer
                break
            acknowledged.add(answer.json()["msg_id"])
        assert refusal is not None, "the disk never filled"
        assert refusal.status_code == 507, refusal.text
        assert refusal.json()["put_status"] == "CREATE_MAPPED_FILE_FAILED", refusal.text
        assert len(acknowledged) * BODY_BYTES > DISK_BYTES // 2, len(acknowledged)
        readable = {message["msg_id"] for queue in read_queues(broker, "Full")
                    for message in queue}
        assert readable == acknowledged, (len(readable), len(acknowledged))
        broker.stop()
