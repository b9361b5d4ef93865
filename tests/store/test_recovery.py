from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from store import Message, MessageStore, PutMessageStatus
from store.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from store.errors import OffsetNotAvailableError
from store.record import DEFAULT_HOST, HEADER_SIZE, encode_message, stamp_offsets
from store.recovery import _entry_matcher
from store.retention import RetentionService
from tests.support.store import SMALL_FILE_BYTES, wait_dispatched

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


# -- when the checkpoint is trusted: each check of _checkpoint_holds, with crafted checkpoints --


def _craft_checkpoint(tmp_path: Path, recover_offset: int, last_record_offset: int,
                      queue_count: int) -> None:
    write_checkpoint(tmp_path / "checkpoint",
                     Checkpoint(recover_offset, last_record_offset, recover_offset, queue_count, 1))


def _restart_with(open_store: OpenStore, tmp_path: Path, recover_offset: int,
                  last_record_offset: int, queue_count: int = 4) -> MessageStore:
    _craft_checkpoint(tmp_path, recover_offset, last_record_offset, queue_count)
    store = open_store()
    assert store.recovery is not None
    return store


def test_clean_restart_trusts_the_checkpoint_and_reports_it(
        open_store: OpenStore, tmp_path: Path) -> None:
    """After a clean shutdown recovery starts at the checkpoint, scans nothing before it, clears
    nothing, and reports so (not crashed, checkpoint used, a plausible duration)."""
    store = open_store()
    _write(store, 150)
    end = store.max_offset
    store.shutdown()
    checkpoint = read_checkpoint(tmp_path / "checkpoint")
    assert checkpoint is not None and checkpoint.recover_offset == end
    store = open_store()
    report = store.recovery
    assert report is not None
    assert (report.crashed, report.checkpoint_used, report.scan_start_offset) == (
        False, True, end)
    assert (report.end_offset, report.scanned_record_count, report.cleared_bytes) == (end, 0, 0)
    assert report.rebuilt_queue_count == 0
    assert 0.01 < report.duration_ms < 60_000
    assert _bodies(store) == _expected(150)


def test_crash_restart_scans_only_after_the_checkpoint(
        open_store: OpenStore, tmp_path: Path) -> None:
    """After a crash, with records written after the last checkpoint (beyond the first file),
    recovery trusts the checkpoint and scans exactly the records after it."""
    store = open_store()
    placed = _write(store, 250)
    checkpoint_offset = store.max_offset
    assert checkpoint_offset > SMALL_FILE_BYTES
    store.flush.stop()  # no checkpoint from now on
    for index in range(250, 270):
        _, done = store.put_message(Message("Rec", b"%06d" % index * 40))
        assert done.result(5) is PutMessageStatus.PUT_OK
    store.commit_log.flush()
    store.halt()
    store = open_store()
    report = store.recovery
    assert report is not None and report.crashed and report.checkpoint_used
    assert report.scan_start_offset == checkpoint_offset
    assert report.scanned_record_count == 20
    assert _bodies(store) == _expected(270)
    assert placed[-1][0] + placed[-1][1] == checkpoint_offset


def test_an_empty_log_recovers_to_zero(open_store: OpenStore, tmp_path: Path) -> None:
    """A store that never stored anything recovers to offset 0 with nothing cleared, and its
    checkpoint (recover offset at the log's start) is trusted."""
    store = open_store()
    store.shutdown()
    store = open_store()
    report = store.recovery
    assert report is not None
    assert (report.end_offset, report.cleared_bytes, report.scanned_record_count) == (0, 0, 0)
    assert report.checkpoint_used and store.max_offset == 0


def test_checkpoint_at_a_file_boundary_keeps_the_records_after_it(
        open_store: OpenStore, tmp_path: Path) -> None:
    """A checkpoint whose recover offset is the start of the second file (the first ends with a
    blank) is trusted, and every record of the later files is scanned and kept."""
    store = open_store()
    placed = _write(store, 300)
    store.halt()
    last_in_first = max(offset for offset, _ in placed if offset < SMALL_FILE_BYTES)
    in_first = sum(1 for offset, _ in placed if offset < SMALL_FILE_BYTES)
    store = _restart_with(open_store, tmp_path, SMALL_FILE_BYTES, last_in_first)
    report = store.recovery
    assert report is not None and report.checkpoint_used
    assert report.scan_start_offset == SMALL_FILE_BYTES
    assert report.scanned_record_count == 300 - in_first
    assert _bodies(store) == _expected(300)


def test_checkpoint_inside_a_later_file_is_trusted(
        open_store: OpenStore, tmp_path: Path) -> None:
    """A checkpoint naming a whole record in a later file, ending at the recover offset, is
    trusted: the scan starts there."""
    store = open_store()
    placed = _write(store, 300)
    store.halt()
    index = next(i for i, (offset, _) in enumerate(placed) if offset > SMALL_FILE_BYTES + 100)
    offset, size = placed[index]
    store = _restart_with(open_store, tmp_path, offset + size, offset)
    report = store.recovery
    assert report is not None and report.checkpoint_used
    assert (report.scan_start_offset, report.scanned_record_count) == (
        offset + size, 300 - index - 1)
    assert _bodies(store) == _expected(300)


@pytest.mark.parametrize("case", ["beyond_files", "queue_missing", "not_a_record",
                                  "not_its_end", "last_record_beyond_files"])
def test_checkpoint_that_does_not_hold_is_not_trusted(
        open_store: OpenStore, tmp_path: Path, case: str) -> None:
    """A checkpoint past the files' end, expecting more consume queues than exist, or whose
    last record is not a whole record ending at the recover offset is ignored: recovery scans
    the whole log and keeps it all."""
    store = open_store()
    placed = _write(store, 200)
    store.halt()
    files_end = len(list((tmp_path / "commitlog").iterdir())) * SMALL_FILE_BYTES
    offset, size = placed[100]
    recover, last, queues = {
        "beyond_files": (files_end + 1, offset, 4),
        "queue_missing": (offset + size, offset, 5),
        "not_a_record": (offset + size, offset + 1, 4),
        "not_its_end": (offset + size + 1, offset, 4),
        "last_record_beyond_files": (files_end, files_end, 4),
    }[case]
    store = _restart_with(open_store, tmp_path, recover, last, queues)
    report = store.recovery
    assert report is not None and report.checkpoint_used is False
    assert (report.scan_start_offset, report.scanned_record_count) == (0, 200)
    assert _bodies(store) == _expected(200)


def test_checkpoint_exactly_at_the_files_end_with_its_queues_is_trusted(
        open_store: OpenStore, tmp_path: Path) -> None:
    """The bounds are inclusive: a checkpoint at the very end of the last file (after its
    blank) and expecting exactly the queues present is trusted."""
    store = open_store()
    placed = _write(store, 500)
    store.halt()
    files = sorted((tmp_path / "commitlog").iterdir())
    assert len(files) == 3
    for extra in files[2:]:
        extra.unlink()
    kept = [(offset, size) for offset, size in placed if offset < 2 * SMALL_FILE_BYTES]
    last_offset, _ = kept[-1]
    store = _restart_with(open_store, tmp_path, 2 * SMALL_FILE_BYTES, last_offset, 4)
    report = store.recovery
    assert report is not None and report.checkpoint_used
    assert report.scan_start_offset == 2 * SMALL_FILE_BYTES
    assert _bodies(store) == _expected(len(kept))


def test_checkpoint_before_any_record_must_be_the_logs_start(
        open_store: OpenStore, tmp_path: Path) -> None:
    """A checkpoint with no record before it is trusted only at the log's start offset."""
    store = open_store()
    placed = _write(store, 50)
    store.halt()
    at_start = _restart_with(open_store, tmp_path, 0, -1, 0)
    assert at_start.recovery is not None and at_start.recovery.checkpoint_used
    at_start.halt()
    size = placed[0][1]
    elsewhere = _restart_with(open_store, tmp_path, size, -1, 0)
    assert elsewhere.recovery is not None and not elsewhere.recovery.checkpoint_used
    assert _bodies(elsewhere) == _expected(50)


def test_damaged_record_before_the_checkpoint_forces_a_full_scan(
        open_store: OpenStore, tmp_path: Path) -> None:
    """A flipped body byte in the record the checkpoint names makes recovery distrust the
    checkpoint and scan from the start, cutting the log at that record."""
    store = open_store()
    placed = _write(store, 120)
    store.halt()
    offset, size = placed[60]
    path = sorted((tmp_path / "commitlog").iterdir())[offset // SMALL_FILE_BYTES]
    position = offset - int(path.name) + HEADER_SIZE + 3
    with path.open("r+b") as file:
        file.seek(position)
        byte = file.read(1)
        file.seek(position)
        file.write(bytes([byte[0] ^ 0x55]))
    store = _restart_with(open_store, tmp_path, offset + size, offset)
    report = store.recovery
    assert report is not None and not report.checkpoint_used
    assert store.max_offset == offset and report.cleared_bytes > 0
    assert _bodies(store) == _expected(60)


def test_queue_entries_are_checked_against_the_records_they_name(
        open_store: OpenStore, tmp_path: Path) -> None:
    """Recovery keeps a consume-queue entry only when the record at its offset has its size,
    queue offset, queue id and topic; an offset that holds no record fails the check."""
    store = open_store()
    placed = _write(store, 300)
    matches = _entry_matcher(store.commit_log)
    offset, size = placed[-1]
    record = store.commit_log.read_record(offset)
    queue_id, queue_offset = record.queue_id, record.queue_offset
    assert matches("Rec", queue_id, queue_offset, (offset, size, 0))
    assert not matches("Rec", queue_id, queue_offset, (offset, size + 1, 0))
    assert not matches("Rec", queue_id, queue_offset + 1, (offset, size, 0))
    assert not matches("Rec", (queue_id + 1) % 4, queue_offset, (offset, size, 0))
    assert not matches("Other", queue_id, queue_offset, (offset, size, 0))
    assert not matches("Rec", queue_id, queue_offset, (offset + 1, size, 0))
    assert not matches("Rec", queue_id, queue_offset, (store.max_offset, size, 0))
    wait_dispatched(store)
    RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                     used_ratio=lambda _: 1.0).delete_expired()
    assert store.min_offset > 0
    assert matches("Rec", 0, 0, (store.min_offset - 1, 1, 0))  # gone with retention
    first = store.commit_log.read_record(store.min_offset)
    assert matches("Rec", first.queue_id, first.queue_offset,
                   (store.min_offset, first.total_size, 0))
    assert not matches("Rec", first.queue_id, first.queue_offset,
                       (store.min_offset, first.total_size - 1, 0))


def test_full_scan_keeps_an_empty_body_and_a_file_ending_in_an_8_byte_blank(
        open_store: OpenStore, tmp_path: Path) -> None:
    """A full scan keeps a record with an empty body, and crosses a file whose blank is the
    smallest one (8 bytes) into the records of the next file."""
    store = open_store()
    _write(store, 150)
    _, done = store.put_message(Message("Rec", b""))
    assert done.result(5) is PutMessageStatus.PUT_OK
    remaining = SMALL_FILE_BYTES - store.max_offset
    filler = remaining - 8 - (HEADER_SIZE + 3 + len("Rec"))
    result, done = store.put_message(Message("Rec", b"f" * filler))
    assert done.result(5) is PutMessageStatus.PUT_OK
    assert result.commit_log_offset + result.wrote_bytes == SMALL_FILE_BYTES - 8
    after, done = store.put_message(Message("Rec", b"after the roll"))
    assert done.result(5) is PutMessageStatus.PUT_OK
    assert after.commit_log_offset == SMALL_FILE_BYTES
    end = store.max_offset
    store.halt()
    (tmp_path / "checkpoint").unlink()
    store = open_store()
    assert store.recovery is not None and store.recovery.scanned_record_count == 153
    assert store.max_offset == end
    assert store.commit_log.read_record(SMALL_FILE_BYTES).body == b"after the roll"


def test_checkpoint_after_the_first_record_is_trusted(
        open_store: OpenStore, tmp_path: Path) -> None:
    """A checkpoint naming the log's first record (at the min offset) and ending after it is
    trusted."""
    store = open_store()
    placed = _write(store, 20)
    store.halt()
    offset, size = placed[0]
    assert offset == 0
    store = _restart_with(open_store, tmp_path, size, 0)
    assert store.recovery is not None and store.recovery.checkpoint_used
    assert store.recovery.scanned_record_count == 19


@pytest.mark.parametrize("damage", ["stale_offset", "negative_body_size", "body_past_record",
                                    "topic_length", "topic_not_utf8"])
def test_scan_stops_at_a_copied_or_inconsistent_record(
        open_store: OpenStore, tmp_path: Path, damage: str) -> None:
    """Bytes after the last record that look like a record but name another offset (stale
    bytes of an earlier life of the file), whose body length or topic length does not fit
    the record, or whose topic is not UTF-8, end the scan: recovery cuts them."""
    store = open_store()
    placed = _write(store, 40)
    end = store.max_offset
    copy = bytearray(store.commit_log.read_bytes(placed[0][0], placed[0][0] + placed[0][1]))
    store.halt()
    if damage != "stale_offset":
        copy[28:36] = end.to_bytes(8, "big")  # the physical offset it would have here
    if damage in ("negative_body_size", "body_past_record"):
        body_size = -1 if damage == "negative_body_size" else len(copy)
        copy[84:88] = body_size.to_bytes(4, "big", signed=True)
    if damage == "topic_length":  # the body and its CRC are whole; the fields after are not
        copy[HEADER_SIZE + int.from_bytes(copy[84:88], "big")] = 200
    if damage == "topic_not_utf8":  # garbage in the name: every length still adds up
        copy[HEADER_SIZE + int.from_bytes(copy[84:88], "big") + 1] = 0xFF
    _recover_with_bytes_at_the_end(open_store, tmp_path, end, copy)


def _recover_with_bytes_at_the_end(open_store: OpenStore, tmp_path: Path, end: int,
                                   damaged: bytes) -> None:
    """Write `damaged` after the last of 40 records, recover with a full scan, and check that
    the 40 records are kept and the damaged bytes cut."""
    path = _last_file(tmp_path)
    with path.open("r+b") as file:
        file.seek(end - int(path.name))
        file.write(damaged)
    (tmp_path / "checkpoint").unlink()
    store = open_store()
    assert store.max_offset == end
    assert store.recovery is not None and store.recovery.cleared_bytes > 0
    assert _bodies(store) == _expected(40)


def test_a_blank_that_does_not_reach_the_files_end_ends_the_scan(
        open_store: OpenStore, tmp_path: Path) -> None:
    """A blank whose size field does not reach the end of its file is damage: the scan stops
    there and the later files are cut, not trusted."""
    store = open_store()
    placed = _write(store, 250)
    store.halt()
    last_in_first = max(offset + size for offset, size in placed if offset < SMALL_FILE_BYTES)
    first = sorted((tmp_path / "commitlog").iterdir())[0]
    with first.open("r+b") as file:
        file.seek(last_in_first)
        file.write((SMALL_FILE_BYTES - last_in_first - 1).to_bytes(4, "big"))
    (tmp_path / "checkpoint").unlink()
    store = open_store()
    assert store.max_offset == last_in_first
    assert store.recovery is not None and store.recovery.scan_start_offset == 0


def test_full_scan_keeps_records_with_properties(open_store: OpenStore, tmp_path: Path) -> None:
    """A full scan keeps records whose properties (keys, tags) fill the end of the record, and
    they read back whole."""
    store = open_store()
    for index in range(30):
        properties = {"KEYS": f"key-{index}", "TAGS": "t" * (index % 5 + 1)}
        _, done = store.put_message(Message("Rec", b"%06d" % index, properties))
        assert done.result(5) is PutMessageStatus.PUT_OK
    end = store.max_offset
    store.halt()
    (tmp_path / "checkpoint").unlink()
    store = open_store()
    assert store.recovery is not None and store.recovery.scanned_record_count == 30
    assert store.max_offset == end and store.recovery.cleared_bytes == 0
    keys = sorted(message.keys or "" for queue_id in range(4)
                  for message in store.get_messages("Rec", queue_id, 0, 100).messages)
    assert keys == sorted(f"key-{index}" for index in range(30))


def test_a_record_running_to_the_files_last_byte_with_a_bad_topic_length_is_cut(
        open_store: OpenStore, tmp_path: Path) -> None:
    """Recovery cuts, rather than fails on, a record whose total size runs to the last byte of
    its file (its body and CRC whole) and whose topic length leaves 1 byte for the 2-byte
    properties length: the field would be read past the file."""
    store = open_store()
    _write(store, 40)
    end = store.max_offset
    store.halt()
    total_size = SMALL_FILE_BYTES - (end - int(_last_file(tmp_path).name))
    body = b"b" * (total_size - (HEADER_SIZE + 1 + len("Rec") + 2))
    record = encode_message(Message("Rec", body), 0, 0, DEFAULT_HOST, SMALL_FILE_BYTES)
    assert isinstance(record, bytes) and len(record) == total_size
    copy = bytearray(record)
    stamp_offsets(copy, 0, 40, end)
    copy[HEADER_SIZE + len(body)] = len("Rec") + 1  # the properties length's 1st byte is last
    _recover_with_bytes_at_the_end(open_store, tmp_path, end, copy)
