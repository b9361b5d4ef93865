"""Reference-counted mapped files: retention retires a file, the last holder closes it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from store import Message, MessageStore
from store.files.mapped_file import MappedFile
from store.record import RecordError
from store.retention import RetentionService
from tests.support.fds import is_mapped, open_fds_of
from tests.support.store import wait_dispatched

OpenStore = Callable[..., MessageStore]


def fill(store: MessageStore, count: int) -> None:
    for index in range(count):
        store.put_message(Message("Old", bytes([index % 256]) * 1500, queue_id=0))
    wait_dispatched(store)


def disk_full_retention(store: MessageStore) -> RetentionService:
    """A retention service that sees a full disk: it removes every file it may."""
    return RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                            used_ratio=lambda _: 0.99)


def test_a_retired_file_refuses_holds_and_its_last_holder_closes_it(tmp_path: Path) -> None:
    """After destroy() no hold succeeds, the file stays while held, and the last release
    unmaps, closes and unlinks it."""
    path = tmp_path / "00000000000000000000"
    mapped = MappedFile(path, 0, 4096, create=True)
    assert mapped.hold() and mapped.hold()
    mapped.destroy()
    assert not mapped.hold()
    assert path.exists() and open_fds_of(path)
    mapped.release()
    assert path.exists()
    mapped.release()
    assert not path.exists() and not open_fds_of(path) and not is_mapped(path)


def test_retention_while_a_reader_holds_a_view(open_store: OpenStore) -> None:
    """Retention that runs while a commit-log reader holds a view of the file it removes
    raises no BufferError; the file stays until the reader is done, then it is unmapped,
    closed and unlinked (no descriptor left in /proc/self/fd)."""
    store = open_store()
    fill(store, 150)
    first = store.commit_log.files.first_file()
    assert first is not None and len(store.commit_log.files.files) >= 3
    path = first.path
    assert open_fds_of(path)
    removed: list[int] = []

    def retention_under_the_reader(mapped: MappedFile) -> None:
        if mapped is first and not removed:
            removed.append(disk_full_retention(store).delete_expired())
            assert path.exists() and is_mapped(path)  # the reader still holds it

    store.commit_log.read_seam = retention_under_the_reader
    message = store.commit_log.read_record(0)
    assert message.commit_log_offset == 0 and message.body == bytes(1500)
    assert removed and removed[0] >= 2
    assert store.min_offset > 0
    assert not path.exists()
    assert open_fds_of(path) == [] and not is_mapped(path)


def test_reads_through_the_store_release_their_holds(open_store: OpenStore) -> None:
    """Queue reads (consume queue, commit log) and dispatch leave no hold behind: retention
    afterwards closes and unlinks the files at once."""
    store = open_store(consume_queue_entries_per_file=16)
    fill(store, 150)
    result = store.get_messages("Old", 0, 0, 100)
    assert len(result.messages) == 100
    commit_files = store.commit_log.files.files[:-1]
    assert all(f.reference_count == 1 for f in commit_files)
    disk_full_retention(store).delete_expired()
    for mapped in commit_files:
        assert not mapped.path.exists() and not open_fds_of(mapped.path)


def test_a_corrupt_record_is_reported_and_the_file_still_closes(open_store: OpenStore) -> None:
    """A RecordError from a held read keeps no view alive: retention still closes the file."""
    store = open_store()
    fill(store, 150)
    first = store.commit_log.files.first_file()
    assert first is not None
    first.write_at(8, b"\xff\xff\xff\xff")  # the body CRC of the first record
    with pytest.raises(RecordError):
        store.commit_log.read_record(0)
    disk_full_retention(store).delete_expired()
    assert not first.path.exists() and not open_fds_of(first.path)


def test_concurrent_holds_and_retire_clean_up_exactly_once() -> None:
    """Holders racing retire() on other threads: cleanup runs exactly once, after the last
    release, and never while a successful hold is outstanding."""
    from store.files.reference import ReferenceCounted

    class Counted(ReferenceCounted):
        __slots__ = ("cleanups", "in_use")

        def __init__(self) -> None:
            super().__init__()
            self.cleanups = 0
            self.in_use = 0

        def _cleanup(self) -> None:
            assert self.in_use == 0, "cleaned up under a holder"
            self.cleanups += 1

    for _ in range(50):
        resource = Counted()
        lock = threading.Lock()

        def use(resource: Counted = resource, lock: threading.Lock = lock) -> None:
            for _ in range(200):
                if not resource.hold():
                    return
                with lock:
                    resource.in_use += 1
                with lock:
                    resource.in_use -= 1
                resource.release()

        threads = [threading.Thread(target=use) for _ in range(4)]
        for thread in threads:
            thread.start()
        resource.retire()
        for thread in threads:
            thread.join(10)
        assert resource.cleanups == 1 and resource.reference_count == 0
