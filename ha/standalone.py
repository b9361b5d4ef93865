"""A slave's store and HA client in a process of its own, with no HTTP (tests and benches
use it to kill a slave or to keep it off the master's GIL).

    python -m ha.standalone DATA_DIR MASTER_HOST:PORT FILE_SIZE_BYTES [--wait-for-go]
                            [--sync-flush]

The HA secret comes from TWINLOG_HA_SECRET; without it the link runs open (this is a tool for
tests and benches, which set it to measure both). TWINLOG_DISK_MAX_USED_RATIO sets retention's
disk-use bound (tests set it high, so that a busy host's disk cannot make the slave delete
its own files). --sync-flush makes it a SYNC_FLUSH slave (it flushes what it applied before
each report; ASYNC_FLUSH otherwise).

Prints READY (with --wait-for-go: then connects only once a line arrives on stdin, so a
bench can time replication apart from process start), then the slave's max offset every
50 ms; SIGTERM stops it cleanly.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from ha import HAConfig, Replication
from store import BrokerRole, FlushDiskType, MessageStore, StoreConfig


def main() -> None:
    data_dir, master, file_size = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    store = MessageStore(StoreConfig(data_dir=data_dir, broker_role=BrokerRole.SLAVE,
                                     mapped_file_size_bytes=file_size,
                                     message_size_max_bytes=16 * 1024,
                                     flush_disk_type=FlushDiskType.SYNC_FLUSH
                                     if "--sync-flush" in sys.argv[4:]
                                     else FlushDiskType.ASYNC_FLUSH,
                                     disk_max_used_ratio=float(os.environ.get(
                                         "TWINLOG_DISK_MAX_USED_RATIO", "0.75"))))
    store.start()
    secret = os.environ.get("TWINLOG_HA_SECRET")
    replication = Replication(HAConfig(broker_role=BrokerRole.SLAVE, ha_master_address=master,
                                       ha_secret=secret,
                                       ha_allow_unauthenticated=secret is None,
                                       ha_reconnect_interval_ms=100,
                                       ha_send_heartbeat_interval_ms=200,
                                       ha_housekeeping_interval_ms=2000), store)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("READY", flush=True)
    if "--wait-for-go" in sys.argv[4:]:
        sys.stdin.readline()
    replication.start()
    while not stop.wait(0.05):
        print(store.max_offset, flush=True)
    replication.stop()
    store.shutdown()


if __name__ == "__main__":
    main()
