"""The bootstrap pull's export is taken at one point of the log (app/broker/sync_export.py):
a retention round that lands in the middle of it (the seam `between`) makes it read again, so
its min offset is where the log begins and its queue starts are that log's."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.broker import pop_snapshots
from app.broker.consumption import GroupConsumption
from app.broker.sync_export import LogStartMoved, table_export
from store.consumption.records import QueueKey
from store.metadata import MetadataTable
from store.retention import RetentionService
from tests.support.app import Served, app_settings, serving
from tests.support.log_fill import fill_past
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio

FILE_SIZE_BYTES = 64 * 1024


def _one_file_round(served: Served) -> Callable[[], int]:
    """A retention round that removes one file (the disk is too full once), writing the
    metadata snapshot first when that file holds the last one's records."""
    broker = served.broker
    store = broker.store

    def run() -> int:
        ratios = itertools.chain([0.99], itertools.repeat(0.0))
        retention = RetentionService(store.config, store.commit_log, store.queues,
                                     store.dispatch, used_ratio=lambda _: next(ratios),
                                     wall_clock_s=time.time)
        retention.metadata_floor = store.metadata_retention_floor
        retention.on_metadata_floor = broker.metadata_snapshots.write
        return retention.delete_expired()

    return run


async def test_a_retention_round_during_the_export_makes_it_read_again(tmp_path: Path) -> None:
    """Gone/0's three records lie in file 1. Retention removed file 0; the export begins
    there (min offset = file 1's start, Gone/0 starting at 0), and a round in the middle
    removes file 1 with Gone/0's consume-queue file. The export answers the log as it is
    then: its min offset is file 2's start, and Gone/0 starts at 3 there. Without the
    re-check it named the old min offset with starts read after the round."""
    settings = app_settings(tmp_path / "b", mapped_file_size_bytes=FILE_SIZE_BYTES,
                            message_size_max_bytes=16384)
    async with serving(settings) as served:
        store = served.broker.store
        response = await served.client.post("/v1/topics", json={
            "name": "Gone", "read_queue_count": 1, "write_queue_count": 1})
        assert response.status_code == 201, response.text
        await fill_past(served, FILE_SIZE_BYTES, FILE_SIZE_BYTES)
        for n in range(3):
            response = await served.client.post("/v1/topics/Gone/messages",
                                                json={"body": f"g{n}"})
            assert response.status_code == 201, response.text
        await fill_past(served, 3 * FILE_SIZE_BYTES, FILE_SIZE_BYTES)
        one_file = _one_file_round(served)
        assert one_file() == 1
        first = store.min_offset
        assert ("Gone", 0, 0) in store.queues.starts_at(first)
        rounds: list[int] = []
        export = table_export(served.broker, MetadataTable.CONSUMER_OFFSET,
                              between=lambda: rounds.append(one_file()))
        assert rounds[0] == 1 and store.min_offset > first  # the round removed file 1
        assert export["min_offset"] == store.min_offset
        starts = {(s["topic"], s["queue_id"]): s["queue_offset"] for s in export["queue_starts"]}
        assert starts[("Gone", 0)] == 3
        assert sorted(starts.items()) == sorted(
            ((topic, queue_id), offset)
            for topic, queue_id, offset in store.queues.starts_at(store.min_offset))
        # A round in every read: refused, for the slave to pull again.
        await fill_past(served, store.max_offset + 4 * FILE_SIZE_BYTES, FILE_SIZE_BYTES)
        with pytest.raises(LogStartMoved):
            table_export(served.broker, MetadataTable.CONSUMER_OFFSET,
                         between=lambda: rounds.append(one_file()))


async def test_a_bootstrap_takes_the_master_s_group_consumption_states(
        tmp_path: Path) -> None:
    """The consumer offsets' export carries the registry's states (as JSON, the pull's
    bytes); an empty registry bootstrapped from it holds the master's: m0 and m2 in flight,
    m1 acked, and its counts."""
    settings = app_settings(tmp_path / "b", pop_invisible_ms_min=1_000)
    async with serving(settings) as served:
        broker = served.broker
        for path, body in (("/v1/topics", {"name": "t", "read_queue_count": 1,
                                           "write_queue_count": 1}),
                           ("/v1/groups", {"name": "g"})):
            response = await served.client.post(path, json=body)
            assert response.status_code == 201, response.text
        for n in range(3):
            response = await served.client.post("/v1/topics/t/messages", json={"body": f"m{n}"})
            assert response.status_code == 201, response.text
        wait_dispatched(broker.store)
        response = await served.client.post("/v1/groups/g/topics/t/messages:receive",
                                            json={"invisible_ms": 60_000})
        handles = [message["receipt_handle"] for message in response.json()["messages"]]
        assert len(handles) == 3
        response = await served.client.post("/v1/groups/g/topics/t/messages:ack",
                                            json={"receipt_handles": handles[1:2]})
        assert response.status_code == 200, response.text
        export = json.loads(json.dumps(table_export(broker, MetadataTable.CONSUMER_OFFSET)))
        slave = GroupConsumption(broker.settings, broker.store, lambda: broker.metadata_store)
        assert pop_snapshots.bootstrap(slave, export)
        assert slave.registry.images() == pop_snapshots.images(broker.consumption)
        state = slave.registry.state(QueueKey("g", "t", 0))
        assert state is not None and sorted(state.in_flight()) == [0, 2]
        assert slave.registry.counts("g", "t").acked == 1
        assert not pop_snapshots.bootstrap(slave, {**export, "pop_queues": [{"group": 1}]})
