"""What dispatch spends on each offset-commit record, in-process: its share of a commit's CPU
on every replica (the master and each slave apply every record).

    python bench/metadata_dispatch.py [--records 20000] [--rounds 3]
    PYTHONPATH=OTHER_CHECKOUT python bench/metadata_dispatch.py   # the same, another build

A MessageStore and a MetadataStore as a broker wires them (the metadata layer attached to
dispatch), one topic and 64 groups; then, per round, `--records` offset-commit records appended
while dispatch's thread is stopped, and dispatched on this thread. Printed: the CPU per record
(this thread's) of each round, and next to it, in the same run, the CPU of appending them (the
baseline: what the master's request path pays for the same records).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if "PYTHONPATH" not in os.environ:  # this checkout's code unless PYTHONPATH names a build
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.broker.metadata_log import record_of  # noqa: E402
from app.settings import load_settings  # noqa: E402
from store import MessageStore  # noqa: E402
from store.dispatch import SystemRecord  # noqa: E402
from store.metadata import MetadataStore  # noqa: E402
from store.metadata.log_records import GroupPut, OffsetSet, TopicPut  # noqa: E402

GROUPS = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="per round")
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="twinlog-metadata-dispatch-"))
    settings = load_settings(data_dir=scratch, mapped_file_size_bytes=1 << 28,
                             ha_listen_port=0, ha_secret="bench-ha-secret")
    store = MessageStore(settings.to_store_config())
    store.start()
    metadata = MetadataStore(f"sqlite:///{scratch / 'metadata.db'}")
    metadata.start()
    try:
        applied = metadata.log_position

        def apply(record: SystemRecord) -> None:  # the broker's hand-off, as app/broker wires it
            metadata.apply_record(record)

        store.attach_system_records(apply, applied.queue_offset,
                                    applied.commit_log_offset,
                                    reset=metadata.reset_applied_state)
        store.put_system_message(record_of(TopicPut("T", 1, 1, 6, 1, 1)))
        for group in range(GROUPS):
            store.put_system_message(record_of(GroupPut(f"g{group}", True, False, 1, 16, 1, 1)))
        while store.dispatch.dispatched_offset < store.max_offset:
            time.sleep(0.01)
        store.dispatch.stop(drain=False)  # from here, dispatch runs on this thread
        offset = 1
        for round_index in range(arguments.rounds):
            append_before_s = time.thread_time()
            for number in range(arguments.records):
                group = number % GROUPS
                store.put_system_message(record_of(OffsetSet(
                    f"g{group}", "T", 0, offset + number // GROUPS, False, number)))
            append_s = time.thread_time() - append_before_s
            offset += arguments.records // GROUPS + 1
            dispatch_before_s = time.thread_time()
            while store.dispatch.dispatch_available():
                pass
            dispatch_s = time.thread_time() - dispatch_before_s
            per_record_us = 1e6 / arguments.records
            print(f"  round {round_index + 1}: dispatch {dispatch_s * per_record_us:6.2f} us "
                  f"per record (apply included); appending them "
                  f"{append_s * per_record_us:6.2f} us per record (the baseline)")
    finally:
        metadata.stop()
        store.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
