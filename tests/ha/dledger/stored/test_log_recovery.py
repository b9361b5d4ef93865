"""Recovery of a store-backed DLedger log after retention removed files the log was not yet
compacted to (the host compacts at its next tick: a stop or a crash can fall between)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha.dledger.stored.state_files import read_log_base
from store import Message
from store.paths import StorePaths
from store.record import decode_record
from tests.support.dledger.stored import FILE_SIZE_BYTES, leader_append, open_storage
from tests.support.store import wait_until


@pytest.mark.parametrize("crash", [False, True])
def test_entries_retention_removed_before_compaction_move_the_base(
        tmp_path: Path, crash: bool) -> None:
    """Retention removes the first files of a committed, dispatched log; the member stops
    (cleanly, or as a crash would) before the log is compacted to them. The restart keeps
    every entry whose record is still in the commit log and moves the base past the others,
    as compaction would have; it does not cut the log at the first missing record."""
    storage, log = open_storage(tmp_path, file_reserved_hours=1e-9,
                                retention_interval_ms=3_600_000)
    entries = [leader_append(log, 1, None)]
    for number in range(40):
        entries.append(leader_append(log, 1, Message("T", bytes([number]) * 3000)))
    storage.set_committed(log.last_index)
    store = storage.store
    limit = store.commit_limit
    assert limit is not None
    wait_until(lambda: store.dispatch.dispatched_offset >= limit)
    assert store.retention.delete_expired() >= 1
    min_offset = store.min_offset
    kept = [e for e in entries if e.payload
            and decode_record(e.payload).commit_log_offset >= min_offset]
    last_index = log.last_index
    assert log.base_index == 0  # not compacted: the host would do it at its next tick
    if crash:
        storage.halt()
    else:
        storage.close()

    storage, log = open_storage(tmp_path, file_reserved_hours=1e-9,
                                retention_interval_ms=3_600_000)
    assert storage.recovery is not None and storage.recovery.first_problem is None
    assert log.last_index == last_index
    assert log.base_index == kept[0].index - 1
    assert read_log_base(StorePaths(tmp_path).dledger_log_base).index == log.base_index
    assert storage.store.max_offset > min_offset >= FILE_SIZE_BYTES
    storage.close()
