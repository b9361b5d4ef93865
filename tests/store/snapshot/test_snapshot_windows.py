"""The export's windows over the commit log (log_reader.iter_windows) against the records
read one at a time (iter_records), where a window's mapping ends; the size walk that finds
a window's records (log_reader._scan) against a walk of one record at a time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from store import Message, MessageStore
from store.record import RECORD_OVERHEAD
from store.snapshot import log_reader
from store.snapshot.log_reader import iter_records, iter_windows, list_log_files, log_range
from tests.support.store import wait_dispatched

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


def _walk(buffer: bytes, position: int, limit: int, records_max: int) -> list[int]:
    """The size walk a record at a time, as _scan's contract says it."""
    starts: list[int] = []
    bound = min(len(buffer), limit)
    while len(starts) < records_max and position < limit and position + 4 <= len(buffer):
        size = int.from_bytes(buffer[position:position + 4], "big", signed=True)
        if size < RECORD_OVERHEAD or position + size > bound:
            break
        starts.append(position)
        position += size
    return starts


_runs = st.lists(st.tuples(st.sampled_from([RECORD_OVERHEAD, RECORD_OVERHEAD + 1, 97, 200]),
                           st.integers(1, 40)), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(runs=_runs, tail=st.sampled_from([b"", b"\x00\x00\x00\x00", b"\x00\x00\x00\x10",
                                         b"\x7f\xff\xff\xff", b"\x00\x00"]),
       cut=st.integers(0, 300), limit_back=st.integers(-50, 400),
       records_max=st.integers(1, 500), data=st.data())
def test_size_walk_takes_what_a_record_at_a_time_walk_takes(
        runs: list[tuple[int, int]], tail: bytes, cut: int, limit_back: int,
        records_max: int, data: st.DataObject) -> None:
    """_scan returns exactly the positions its contract says, read here one record at a
    time: across runs of sizes, up to a bad or unwritten size, a record cut by the mapping's
    end (or its size field cut), the limit, and `records_max`."""
    buffer = bytearray()
    for size, repeat in runs:
        # One filler per run (a draw per record cost most of the test's time, and the walk
        # reads none of it): random bytes between the size fields all the same.
        filler = data.draw(st.binary(min_size=size - 4, max_size=size - 4))
        buffer += (size.to_bytes(4, "big") + filler) * repeat
    buffer += tail
    buffer = buffer[:max(RECORD_OVERHEAD + 4, len(buffer) - cut)]
    limit = len(buffer) - limit_back
    mapping = bytes(buffer)
    scanned = log_reader._scan(mapping, 0, limit, records_max)  # type: ignore[arg-type]
    assert scanned.dtype == np.int64
    assert scanned.tolist() == _walk(mapping, 0, limit, records_max)
