from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from store import MessageStore
from tests.support.child_lines import ChildLines
from tests.support.crash_writer import body_for
from tests.support.store import small_config

pytestmark = pytest.mark.processes

ACKS_BEFORE_KILL = 1500


def test_sigkill_loses_no_acknowledged_message(tmp_path: Path) -> None:
    """A SYNC_FLUSH writer killed with SIGKILL mid-stream: every acknowledged message reads
    back intact after recovery, and the log ends on a record boundary."""
    file_size = 256 * 1024
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.crash_writer", str(tmp_path), str(file_size)],
        stdout=subprocess.PIPE, text=True, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    acked: list[tuple[int, int, int]] = []
    try:
        lines = ChildLines(child)
        assert lines.next() == "READY"
        while len(acked) < ACKS_BEFORE_KILL:
            _, index, offset, size = lines.next().split()
            acked.append((int(index), int(offset), int(size)))
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(10)
    assert len(acked) == ACKS_BEFORE_KILL

    store = MessageStore(small_config(tmp_path, mapped_file_size_bytes=file_size,
                                      consume_queue_entries_per_file=256))
    report = store.start()
    try:
        assert report.crashed
        for index, offset, size in acked:
            record = store.commit_log.read_record(offset)
            assert (record.body, record.total_size, record.keys) == (
                body_for(index), size, str(index))
        # Walk the whole log: record after record, ending exactly at the max offset.
        offset = store.min_offset
        while offset < store.max_offset:
            if offset % file_size and store.commit_log.read_bytes(offset, offset + 8)[4:8] == (
                    b"\xcb\xd4\x31\x94"):
                offset = (offset // file_size + 1) * file_size
                continue
            offset += store.commit_log.read_record(offset).total_size
        assert offset == store.max_offset == report.end_offset
        assert offset >= acked[-1][1] + acked[-1][2]
    finally:
        store.shutdown()
