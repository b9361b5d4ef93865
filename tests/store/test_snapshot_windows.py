"""The export's windows over the commit log (log_reader.iter_windows) against the records
read one at a time (iter_records), where a window's mapping ends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from store import Message, MessageStore
from store.snapshot.log_reader import iter_records, iter_windows, list_log_files, log_range
from tests.store.conftest import wait_dispatched

OpenStore = Callable[..., MessageStore]
FIRST_RECORDS = 10


@pytest.mark.parametrize("past_boundary_bytes", [0, 1, 2, 3, 4, 100])
def test_a_window_that_ends_at_a_record_boundary_reads_on(
        open_store: OpenStore, tmp_path: Path, past_boundary_bytes: int) -> None:
    """A window mapped to end exactly where a record ends, or fewer bytes after it than a
    record's size field takes, is followed by the next window from that record: every
    record is read once, in order (it raised struct.error reading a size past the map)."""
    store = open_store(data_dir=tmp_path / "data", mapped_file_size_bytes=1024 * 1024)
    for index in range(200):
        store.put_message(Message("Windows", bytes(500), {"KEYS": f"k{index % 7}"}))
    wait_dispatched(store)
    store.shutdown()
    files = list_log_files(tmp_path / "data" / "commitlog")
    low, high = log_range(files)
    records = list(iter_records(files, low, high))
    assert len(records) == 200
    # The second window starts after FIRST_RECORDS records: make it end after 40 more.
    window_bytes = sum(record.total_size for record in records[FIRST_RECORDS:50])
    read = [window.base_offset + int(start)
            for window in iter_windows(files, low, high,
                                       window_bytes=window_bytes + past_boundary_bytes,
                                       first_records=FIRST_RECORDS)
            for start in window.starts]
    assert read == [record.commit_log_offset for record in records]
