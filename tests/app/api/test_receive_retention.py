"""Group consumption's state past retention (store/consumption/snapshot.py): a metadata
snapshot carries the registry's states, so tables rebuilt from the last snapshot (a start
whose persisted position is below what retention left) keep what is in flight and what was
acked, though the pop records that said so lie before the snapshot. A fake clock drives
time."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from store.consumption.records import QueueKey
from store.paths import StorePaths
from tests.app.api.test_receive import NOW_MS, _ack, _receive, _settings, _setup
from tests.support.app import serving
from tests.support.log_fill import fill_past
from tests.support.store import wait_dispatched
from tests.support.timers import FakeClock

pytestmark = pytest.mark.anyio

FILE_SIZE_BYTES = 64 * 1024
# Retention finds the disk too full at every round: it removes every file it may.
RETENTION = {"mapped_file_size_bytes": FILE_SIZE_BYTES, "message_size_max_bytes": 16384,
             "disk_max_used_ratio": 1e-9}


async def test_in_flight_and_acked_messages_survive_a_rebuild_past_retention(
        tmp_path: Path) -> None:
    """The tables are persisted at the group's creation (a copy of the database then); the
    log fills past three files, the group receives m0-m2 and acks m1 in the last file, and
    retention removes every earlier file after a snapshot at the log's end. Started with
    that copy, the tables are below what retention left: they and the registry are rebuilt
    from the snapshot, past the pop records before it, and the registry keeps m0 and m2 in
    flight and m1 acked."""
    settings = _settings(tmp_path / "b", **RETENTION)
    database = StorePaths(settings.data_dir).metadata_database
    clock = FakeClock(NOW_MS)
    async with serving(settings) as served:
        group, topic = await _setup(served, queues=1)
    early = tmp_path / "early.db"
    shutil.copy(database, early)  # tables persisted below the pop records
    async with serving(settings) as served:
        served.broker.consumption.clock_ms = clock
        store = served.broker.store
        await fill_past(served, 3 * FILE_SIZE_BYTES, FILE_SIZE_BYTES)
        for n in range(4):
            response = await served.client.post(f"/v1/topics/{topic}/messages",
                                                json={"body": f"m{n}", "body_encoding": "utf8"})
            assert response.status_code == 201, response.text
        wait_dispatched(store)
        received = await _receive(served, group, topic, max_messages=3, invisible_ms=20_000)
        assert [message["body"] for message in received] == ["m0", "m1", "m2"]
        assert (await _ack(served, group, topic, [received[1]["receipt_handle"]])).status_code \
            == 200
        wait_dispatched(store)
        last_file = store.commit_log.files.files[-1].start_offset
        assert store.retention.delete_expired() > 0
        assert store.min_offset == last_file  # the pop records and m0-m3 are retained
    shutil.copy(early, database)
    async with serving(settings) as served:
        served.broker.consumption.clock_ms = clock
        broker = served.broker
        assert broker.store.system_feed.rebuild_count == 1
        in_flight = broker.consumption.registry.queue_counts(QueueKey(group, topic, 0))
        assert (in_flight.in_flight, in_flight.waiting) == (2, 0)  # m0, m2 (m3 not scanned)
        clock.now_ms += 20_000  # their invisible time passes
        broker.expire_deliveries()
        wait_dispatched(broker.store)
        back = await _receive(served, group, topic)
        assert sorted((message["body"], message["delivery_attempt"]) for message in back) == \
            [("m0", 2), ("m2", 2), ("m3", 1)]  # m1 was acked: never again
