"""DLedger mode in process (a one-member group over a real store): the leader writes metadata
snapshots through its member when retention reaches the file of the last one, retention
keeps every file from the last whole snapshot on, and a member whose tables are below what
retention left takes them from the log's snapshot."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from app.broker.broker import Broker
from store.metadata import MetadataStore
from store.paths import StorePaths
from store.system_topics import METADATA_TOPIC
from tests.app.api.test_dledger_metadata import _leading
from tests.support.store import wait_until

pytestmark = pytest.mark.anyio

# Commit-log files of 64 KiB; 2,000-byte bodies fill one in about 30 messages.
SMALL: dict[str, Any] = {"mapped_file_size_bytes": 64 * 1024,
                         "message_size_max_bytes": 8 * 1024}
FILL_BODY = "f" * 2000
# Retention sees every file as this old (its clock is a seam: RetentionService wall_clock_s).
FAR_FUTURE_S = 10 * 365 * 24 * 3600


def _tables(metadata: MetadataStore) -> Any:
    return metadata.snapshot_tables()[1]


def _expire_files(broker: Broker) -> int:
    wait_until(broker.store.dispatch_caught_up)  # retention removes dispatched files only
    retention = broker.store.retention
    retention._wall_clock_s = lambda: time.time() + FAR_FUTURE_S
    # The member's host holds retention at its log's end as of its last tick (a lone member
    # has no peer behind): wait for a tick past the fill, or the fill's first files are held.
    end_offset = broker.store.max_offset
    wait_until(lambda: retention.hold_offset is None or retention.hold_offset >= end_offset)
    return retention.delete_expired()


async def _fill(served: Any, topic: str, count: int) -> None:
    for number in range(count):
        put = await served.client.post(f"/v1/topics/{topic}/messages",
                                       json={"body": f"{number}-{FILL_BODY}"})
        assert put.status_code == 201, put.text


async def test_a_restart_below_retention_takes_the_tables_from_the_log_snapshot(
        tmp_path: Path) -> None:
    """Topic Kept and group G's offset on it are records of the first file. Retention
    reaches it: the leader writes a snapshot through its member (committed like any metadata
    record), and the first files go. Restarted with no tables at all (its database removed:
    a persisted position below what retention left), the member holds the same tables, from
    the snapshot; the records that made them are gone."""
    async with _leading(tmp_path, **SMALL) as served:
        client, broker = served.client, served.broker
        created = await client.post("/v1/topics", json={"name": "Kept", "read_queue_count": 2,
                                                        "write_queue_count": 2})
        assert created.status_code == 201, created.text
        await _fill(served, "Kept", 3)
        committed = await client.put("/v1/groups/G/offsets/Kept/queues/0",
                                     json={"offset": 1})
        assert committed.status_code == 200, committed.text
        await _fill(served, "Fill", 70)  # past the first two files
        before = _tables(broker.metadata_store)
        assert _expire_files(broker) >= 1
        store = broker.store
        assert store.min_offset > 0
        snapshot = store.system_feed.latest_snapshot
        assert snapshot is not None and snapshot.offset >= store.min_offset
        # The records that created Kept and set G's offset are gone from the log.
        assert store.first_retained_queue_offset(METADATA_TOPIC, 0) > 2
    StorePaths(tmp_path).metadata_database.unlink()
    async with _leading(tmp_path, **SMALL) as served:
        broker = served.broker
        wait_until(lambda: _tables(broker.metadata_store) == before)
        offset = broker.metadata_store.get_consumer_offset(group_name="G", topic="Kept",
                                                           queue_id=0)
        assert offset == 1
        put = await served.client.post("/v1/topics/Kept/messages", json={"body": "after"})
        assert put.status_code == 201, put.text


async def test_a_leader_writes_a_snapshot_once_enough_records_follow_the_last(
        tmp_path: Path) -> None:
    """metadata_snapshot_records_max 5: after a topic and 6 offset commits the leader's check
    writes a snapshot through its member, committed and dispatched, its tables those of the log;
    right after, the check finds nothing due."""
    async with _leading(tmp_path, metadata_snapshot_records_max=5) as served:
        client, broker = served.client, served.broker
        created = await client.post("/v1/topics", json={"name": "T", "read_queue_count": 1,
                                                        "write_queue_count": 1})
        assert created.status_code == 201, created.text
        await _fill(served, "T", 6)
        for offset in range(6):
            committed = await client.put("/v1/groups/G/offsets/T/queues/0",
                                         json={"offset": offset})
            assert committed.status_code == 200, committed.text
        store = broker.store
        assert store.system_feed.latest_snapshot is None
        assert broker.snapshot_if_due()
        snapshot = store.system_feed.latest_snapshot
        assert snapshot is not None
        commit_limit = store.commit_limit
        assert commit_limit is not None and snapshot.offset < commit_limit
        assert not broker.snapshot_if_due()
        assert store.metadata_records_since_snapshot() == snapshot.parts
