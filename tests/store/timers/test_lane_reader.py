"""The scheduler's lane read: runs of entries under one lock hold, gaps passed over, the
queue's min when retention passed the cursor, and no read past a file of entries."""

from __future__ import annotations

from pathlib import Path

from store import Message, MessageStore
from store.reads import GetMessageStatus
from store.timers.lane_reader import read_lane
from tests.support.store import small_config, wait_dispatched


def test_a_lane_read_passes_gaps_and_stops_at_a_file_of_entries(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path, consume_queue_entries_per_file=8))
    store.start()
    try:
        results = [store.put_message(Message("Lane", str(n).encode(), queue_id=0))[0]
                   for n in range(3)]
        wait_dispatched(store)
        queue = store.queues.get("Lane", 0)
        assert queue is not None
        last = results[-1]
        # entries 3..5 are gaps (records the queue will never have), 6 and 9 are records
        assert queue.put(6, last.commit_log_offset, last.wrote_bytes, 0)
        assert queue.put(9, results[0].commit_log_offset, results[0].wrote_bytes, 0)
        read = read_lane(store.commit_log, store.queues, "Lane", 0, 1, 64)
        assert read.status is GetMessageStatus.FOUND
        assert [m.body for m in read.messages] == [b"1", b"2", b"2"]
        assert read.next_offset == 8  # the first file holds entries 0..7
        rest = read_lane(store.commit_log, store.queues, "Lane", 0, read.next_offset, 64)
        assert [m.body for m in rest.messages] == [b"0"] and rest.next_offset == 10
        end = read_lane(store.commit_log, store.queues, "Lane", 0, 10, 64)
        assert end.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE and end.next_offset == 10
        gaps = read_lane(store.commit_log, store.queues, "Lane", 0, 3, 3)
        assert gaps.messages == [] and gaps.next_offset == 6
        missing = read_lane(store.commit_log, store.queues, "None", 0, 0, 64)
        assert missing.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    finally:
        store.shutdown()
