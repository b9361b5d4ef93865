"""Child process of the crash test: appends with SYNC_FLUSH and reports every acknowledged
message on stdout as `ACK <index> <commit_log_offset> <size>` until it is killed."""

from __future__ import annotations

import sys
from pathlib import Path

from store import FlushDiskType, Message, MessageStore, PutMessageStatus, StoreConfig
from tests.support.store import TEST_DISK_MAX_USED_RATIO


def body_for(index: int) -> bytes:
    return (b"crash-%08d-" % index) * (1 + index % 50)


def main() -> None:
    data_dir, file_size = Path(sys.argv[1]), int(sys.argv[2])
    config = StoreConfig(
        data_dir=data_dir,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        mapped_file_size_bytes=file_size,
        message_size_max_bytes=16 * 1024,
        consume_queue_entries_per_file=256,
        disk_max_used_ratio=TEST_DISK_MAX_USED_RATIO,  # not the host's disk use
    )
    store = MessageStore(config)
    store.start()
    print("READY", flush=True)
    index = 0
    while True:  # bounded by the parent, which kills this process
        result, done = store.put_message(Message("Crash", body_for(index), {"KEYS": str(index)}))
        if done.result(10) is PutMessageStatus.PUT_OK:
            print(f"ACK {index} {result.commit_log_offset} {result.wrote_bytes}", flush=True)
        index += 1


if __name__ == "__main__":
    main()
