from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from store import Message, MessageStore, PutMessageStatus
from store.errors import OffsetNotAvailableError
from store.record import HEADER_SIZE
from tests.store.conftest import SMALL_FILE_BYTES, wait_dispatched

OpenStore = Callable[..., MessageStore]


def _write(store: MessageStore, count: int) -> list[tuple[int, int]]:
    """(offset, size) of each record, all flushed, dispatched and checkpointed."""
    placed = []
    for index in range(count):
        result, done = store.put_message(Message("Rec", b"%06d" % index * 40))
        assert done.result(5) is PutMessageStatus.PUT_OK
        placed.append((result.commit_log_offset, result.wrote_bytes))
    wait_dispatched(store)
    # The flush thread checkpoints on its own schedule, through the same temp file: checkpoint
    # with it stopped, never beside it (two writers raced on checkpoint.tmp under load).
    store.flush.stop()
    store.flush.checkpoint()
    store.flush.start()
    return placed


def _bodies(store: MessageStore) -> list[bytes]:
    bodies = []
    for queue_id in range(4):
        offset = 0
        while True:
            batch = store.get_messages("Rec", queue_id, offset, 1000)
            if not batch.messages:
                break
            bodies.extend(m.body for m in batch.messages)
            offset = batch.next_offset
    return sorted(bodies)


def _expected(count: int) -> list[bytes]:
    return sorted(b"%06d" % index * 40 for index in range(count))


def _last_file(tmp_path: Path) -> Path:
    return sorted((tmp_path / "commitlog").iterdir())[-1]


def test_torn_tail_keeps_records_before_it(open_store: OpenStore, tmp_path: Path) -> None:
    """A last file cut mid-record recovers every record before the cut and nothing after."""
    store = open_store()
    placed = _write(store, 200)
    store.halt()
    last_offset, last_size = placed[-1]
    cut = last_offset - int(_last_file(tmp_path).name) + last_size // 2
    os.truncate(_last_file(tmp_path), cut)
    store = open_store()
    assert store.max_offset == last_offset
    assert _bodies(store) == _expected(199)
    result, _ = store.put_message(Message("Rec", b"next"))
    assert result.commit_log_offset == last_offset  # appends continue on the boundary


def test_flipped_body_byte_drops_that_record_and_later(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """A corrupt byte inside the last record's body drops that record only."""
    store = open_store()
    placed = _write(store, 150)
    store.halt()
    last_offset, _ = placed[-1]
    path = _last_file(tmp_path)
    position = last_offset - int(path.name) + HEADER_SIZE + 3
    with path.open("r+b") as file:
        file.seek(position)
        byte = file.read(1)
        file.seek(position)
        file.write(bytes([byte[0] ^ 0x55]))
    # Make recovery scan that record: a checkpoint at the start forces a full scan.
    (tmp_path / "checkpoint").write_bytes(b"\x00" * 36)
    store = open_store()
    assert store.max_offset == last_offset
    assert _bodies(store) == _expected(149)
    with pytest.raises(OffsetNotAvailableError):
        store.commit_log.read_record(last_offset)


def test_corrupt_record_in_middle_drops_everything_after(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """Damage in a middle file keeps the prefix before it: later files are removed."""
    store = open_store()
    placed = _write(store, 300)
    store.halt()
    victim = next(p for p in placed if p[0] > SMALL_FILE_BYTES + 100)
    index = placed.index(victim)
    path = sorted((tmp_path / "commitlog").iterdir())[1]
    with path.open("r+b") as file:
        file.seek(victim[0] - SMALL_FILE_BYTES + 4)
        file.write(b"\xde\xad\xbe\xef")  # the magic
    (tmp_path / "checkpoint").unlink()
    store = open_store()
    assert store.max_offset == victim[0]
    assert len(list((tmp_path / "commitlog").iterdir())) == 2
    assert _bodies(store) == sorted(b"%06d" % i * 40 for i in range(index))


def test_zeroed_checkpoint_scans_everything(open_store: OpenStore, tmp_path: Path) -> None:
    """A zeroed checkpoint fails its CRC: recovery scans the whole log and keeps it all."""
    store = open_store()
    _write(store, 250)
    store.halt()
    size = (tmp_path / "checkpoint").stat().st_size
    (tmp_path / "checkpoint").write_bytes(bytes(size))
    store = open_store()
    assert store.recovery is not None
    assert not store.recovery.checkpoint_used and store.recovery.scan_start_offset == 0
    assert store.recovery.scanned_record_count == 250
    assert _bodies(store) == _expected(250)


def test_lost_consume_queues_are_rebuilt(open_store: OpenStore, tmp_path: Path) -> None:
    """Consume queues are derived data: deleted ones are rebuilt from the commit log."""
    store = open_store()
    _write(store, 120)
    store.shutdown()
    for queue_file in (tmp_path / "consumequeue" / "Rec" / "2").iterdir():
        queue_file.unlink()
    (tmp_path / "consumequeue" / "Rec" / "2").rmdir()
    store = open_store()
    assert _bodies(store) == _expected(120)


def test_broken_consume_queue_file_is_rebuilt(open_store: OpenStore, tmp_path: Path) -> None:
    """A consume-queue file of the wrong size is removed and rebuilt, nothing is lost."""
    store = open_store()
    _write(store, 300)
    store.shutdown()
    first = sorted((tmp_path / "consumequeue" / "Rec" / "1").iterdir())[0]
    os.truncate(first, 7)
    store = open_store()
    assert store.recovery is not None and store.recovery.rebuilt_queue_count == 1
    assert _bodies(store) == _expected(300)


def test_consume_queue_entries_past_the_log_are_dropped(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """Entries pointing past a torn commit log are truncated, so reads never see them."""
    store = open_store()
    placed = _write(store, 100)
    store.halt()
    cut_offset = placed[60][0]
    path = _last_file(tmp_path)
    os.truncate(path, cut_offset - int(path.name))
    store = open_store()
    assert _bodies(store) == _expected(60)
    total_entries = sum(q.max_queue_offset for q in store.queues.all())
    assert total_entries == 60


def test_clean_shutdown_removes_abort_marker(open_store: OpenStore, tmp_path: Path) -> None:
    """The abort marker exists while running and is gone after a clean shutdown."""
    store = open_store()
    assert (tmp_path / "abort").exists()
    store.shutdown()
    assert not (tmp_path / "abort").exists()
    store = open_store()
    assert store.recovery is not None and not store.recovery.crashed
