"""A full disk (issue 9, item 2): space is reserved when a file is created, so ENOSPC answers
CREATE_MAPPED_FILE_FAILED instead of killing the process with SIGBUS at the first write into
a sparse mapping; nothing is left half written, reads go on, and writes resume by themselves
when space comes back. Runs on a real 4 MiB tmpfs (skipped where mounting is not permitted)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Message, MessageStore, PutMessageStatus
from store.paths import name_to_offset
from tests.support.small_fs import fill, small_fs
from tests.support.store import SMALL_FILE_BYTES, small_config, wait_dispatched

BODY_BYTES = 2000
PUTS_MAX = 400  # about 12 files of 64 KiB: far more than a full 4 MiB tmpfs takes


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Path]:
    with small_fs(tmp_path / "fs") as mounted:
        yield mounted


def _bodies(store: MessageStore) -> list[bytes]:
    bodies: list[bytes] = []
    for queue_id in range(store.config.default_queue_count):
        bodies += [m.body for m in store.get_messages("Full", queue_id, 0, 10_000).messages]
    return sorted(bodies)


def _put(store: MessageStore, index: int) -> PutMessageStatus:
    result, _ = store.put_message(Message("Full", index.to_bytes(4, "big") * (BODY_BYTES // 4)))
    return result.status


def test_enospc_at_file_creation_answers_create_mapped_file_failed(fs: Path) -> None:
    """With the disk full, the put that needs a new file answers CREATE_MAPPED_FILE_FAILED
    (no SIGBUS), every log file left is whole, stored messages stay readable, and puts succeed
    again without a restart once space is back; a restart then recovers every stored one."""
    config = small_config(fs / "store", disk_reserve_bytes=0)  # the disk's own ENOSPC
    store = MessageStore(config)
    store.start()
    stored = [index for index in range(20) if _put(store, index) is PutMessageStatus.PUT_OK]
    wait_dispatched(store)
    filler = fill(fs)
    statuses: list[PutMessageStatus] = []
    for index in range(20, 20 + PUTS_MAX):
        statuses.append(_put(store, index))
        if statuses[-1] is PutMessageStatus.PUT_OK:
            stored.append(index)
        else:
            break
    assert statuses[-1] is PutMessageStatus.CREATE_MAPPED_FILE_FAILED, statuses[-3:]
    result, _ = store.put_message(Message("Full", b"still full"))
    assert result.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert "No space left" in result.detail
    for path in (fs / "store" / "commitlog").iterdir():  # nothing half written
        assert name_to_offset(path.name) is not None, path
        assert path.stat().st_size == SMALL_FILE_BYTES, path
    first = store.get_messages("Full", 0, 0, 1).messages
    assert first and first[0].body[:4] == (0).to_bytes(4, "big")
    filler.unlink()
    assert _put(store, 10_000) is PutMessageStatus.PUT_OK
    stored.append(10_000)
    wait_dispatched(store)
    expected = sorted(i.to_bytes(4, "big") * (BODY_BYTES // 4) for i in stored)
    assert _bodies(store) == expected
    store.shutdown()
    store = MessageStore(config)
    store.start()
    try:
        assert _bodies(store) == expected
    finally:
        store.shutdown()


def test_every_acknowledged_message_is_indexed_when_the_disk_fills(fs: Path) -> None:
    """Consume-queue files of 6 MB (RocketMQ's 300,000 entries) on a 4 MiB disk: each queue
    reserves 16 KiB steps, not its whole file, so all four queues exist; the commit log stops
    taking files while disk_reserve_bytes is left, answering CREATE_MAPPED_FILE_FAILED; every
    PUT_OK is consumable, and once space returns puts are PUT_OK again without a restart."""
    config = small_config(fs / "store", mapped_file_size_bytes=256 * 1024,
                          consume_queue_entries_per_file=300_000,
                          disk_reserve_bytes=512 * 1024)
    ballast = fs / "ballast"  # what an operator frees at the end
    ballast.write_bytes(bytes(1 << 20))
    store = MessageStore(config)
    store.start()
    try:
        stored: list[int] = []
        statuses: list[PutMessageStatus] = []
        for index in range(5000):  # about 10 MB: more than the disk holds
            statuses.append(_put(store, index))
            if statuses[-1] is not PutMessageStatus.PUT_OK:
                break
            stored.append(index)
        assert statuses[-1] is PutMessageStatus.CREATE_MAPPED_FILE_FAILED, statuses[-3:]
        result, _ = store.put_message(Message("Full", b"refused"))
        assert "disk_reserve_bytes" in result.detail, result.detail
        wait_dispatched(store)
        expected = sorted(i.to_bytes(4, "big") * (BODY_BYTES // 4) for i in stored)
        assert len(stored) > 1000 and _bodies(store) == expected
        assert store.dispatch.failures.failed_queues() == []
        for queue in (fs / "store" / "consumequeue" / "Full").iterdir():
            (queue_file,) = queue.iterdir()
            assert queue_file.stat().st_blocks * 512 < 64 * 1024, queue_file
        # Space comes back (retention, an operator): puts resume by themselves.
        ballast.unlink()
        assert _put(store, 100_000) is PutMessageStatus.PUT_OK
    finally:
        store.shutdown()
