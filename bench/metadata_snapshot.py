"""What a metadata snapshot costs (app/broker/metadata_snapshots.py), in process.

    python bench/metadata_snapshot.py            # 2,000 topics, 200 groups, 20,000 offsets
    python bench/metadata_snapshot.py --quick    # a tenth of that

A classic master writes a snapshot of its tables when retention reaches the file of the last
one. Figures, for one store with those tables and every topic's 4 queues started:
  - the snapshot's size and parts;
  - the whole write (wait for dispatch, read the tables, encode, append, wait for its
    dispatch), and the part of it that holds the commit log's append lock (puts wait that
    long), next to the baseline of the same run: appending the same records, already built,
    with `put_system_messages` (the append alone);
  - the load of those records by a replica's metadata layer (a rebuild starting at the
    snapshot; in normal dispatch, where the tables hold them, the parts pass as nothing).
Data in a temporary directory, removed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.broker.metadata_log import MetadataLog  # noqa: E402
from app.broker.metadata_snapshots import MetadataSnapshots  # noqa: E402
from bench.common import header, row, timed  # noqa: E402
from store import Message, MessageStore, StoreConfig  # noqa: E402
from store.dispatch import SystemRecord  # noqa: E402
from store.metadata import MetadataStore  # noqa: E402
from store.metadata.log_records import (  # noqa: E402
    GroupPut,
    OffsetSet,
    TopicPut,
    decode,
)
from store.system_topics import METADATA_TOPIC, PROPERTY_OP  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    topics, groups, offsets = 2000 // scale, 200 // scale, 20000 // scale
    root = Path(tempfile.mkdtemp(prefix="bench-metadata-snapshot-"))
    try:
        run(root, topics, groups, offsets)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: Path, topic_count: int, group_count: int, offset_count: int) -> None:
    store = MessageStore(StoreConfig(data_dir=root / "log", mapped_file_size_bytes=64 << 20,
                                     disk_max_used_ratio=1.0))
    store.start()
    store.put_message(Message("first", b"x", queue_id=0))  # the first file made before
    metadata = MetadataStore(f"sqlite:///{root / 'metadata.db'}")
    metadata.start()
    store.attach_system_records(metadata.apply_record, 0, None, metadata.reset_applied_state)
    for number in range(topic_count):
        metadata.apply_change(TopicPut(f"topic-{number}", 4, 4, 6, 1, 1))
        for queue_id in range(4):
            store.queues.start_at(f"topic-{number}", queue_id, 1 + number % 97)
    store.commit_log.set_queue_offsets(store.queues.queue_offsets())
    for number in range(group_count):
        metadata.apply_change(GroupPut(f"group-{number}", True, False, 1, 16, 1, 1))
    for number in range(offset_count):
        metadata.apply_change(OffsetSet(f"group-{number % group_count}",
                                        f"topic-{number // group_count % topic_count}",
                                        number % 4, number, False, 2))
    metadata.flush_consumer_offsets()  # the setup's offsets persisted, as a broker's are
    snapshots = MetadataSnapshots(store, MetadataLog(store), lambda: metadata)
    held_s: list[float] = []
    append_built = store.commit_log.append_built

    def timed_append(build):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return append_built(build)
        finally:
            held_s.append(time.perf_counter() - started)

    store.commit_log.append_built = timed_append  # type: ignore[method-assign]
    start = store.max_offset
    write_s = timed(lambda: snapshots.write())
    end = store.max_offset
    store.wait_dispatched(end, 120_000).wait(None)  # the write waits 10 s for its apply at most
    messages = store.get_messages(METADATA_TOPIC, 0, 0, 10_000).messages
    parts = [Message(METADATA_TOPIC, m.body, properties=dict(m.properties), queue_id=0)
             for m in messages]
    baseline_s = timed(lambda: store.put_system_messages(parts))
    records = [SystemRecord(m.commit_log_offset, m.queue_offset,
                            m.properties.get(PROPERTY_OP, ""), m.body) for m in messages]
    apply_s = timed(lambda: [metadata.apply_change(decode(r.op, r.body)) for r in records])
    header(f"metadata snapshot: {topic_count} topics x 4 queues, {group_count} groups, "
           f"{offset_count} offsets")
    row("snapshot bytes", end - start, "bytes")
    row("parts", len(parts), "records")
    row("append of the same records (baseline)", baseline_s * 1000, "ms")
    row("commit-log lock held by the snapshot", sum(held_s) * 1000, "ms", baseline_s * 1000)
    row("whole write (reads, encodes, waits)", write_s * 1000, "ms", baseline_s * 1000)
    row("load by a rebuilding replica's tables", apply_s * 1000, "ms", baseline_s * 1000)
    store.detach_system_records()
    metadata.stop()
    store.shutdown()


if __name__ == "__main__":
    main()
