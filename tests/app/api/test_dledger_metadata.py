"""DLedger mode in process (a one-member group: it elects itself): metadata changes are
records the member puts through its log and applies by dispatch; a record it cannot apply
makes it not ready and counts; the data dir keeps the group's membership."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from ha.dledger.stored.membership import MembershipMismatch
from store import Message
from store.system_topics import METADATA_TOPIC, PROPERTY_OP
from tests.support.app import Served, app_settings, serving
from tests.support.store import wait_until

pytestmark = pytest.mark.anyio


@contextmanager
def _bound() -> Iterator[socket.socket]:
    bound = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    bound.bind(("127.0.0.1", 0))
    try:
        yield bound
    finally:
        bound.close()


def _settings(data_dir: Path, port: int, peers: str | None = None, **overrides: Any) -> Any:
    peers = peers or f"n0-127.0.0.1:{port}"
    http_peers = ";".join(f"{peer.split('-')[0]}-127.0.0.1:{number + 1}"
                          for number, peer in enumerate(peers.split(";")))
    # A member alone in its group leads after its first election timeout: 200-400 ms here,
    # not the default's 0.6-1.2 s at each of these files' starts and restarts.
    return app_settings(data_dir, replication_mode="dledger", dledger_self_id="n0",
                        dledger_peers=peers, dledger_http_peers=http_peers,
                        dledger_secret="test-dledger-secret", dledger_election_timeout_ms=200,
                        **overrides)


@asynccontextmanager
async def _leading(data_dir: Path, **overrides: Any) -> AsyncIterator[Served]:
    """A one-member group, served once it takes writes."""
    with _bound() as bound:
        port = bound.getsockname()[1]
        bound.close()  # the member binds its own address from dledger_peers
        async with serving(_settings(data_dir, port, **overrides)) as served:
            wait_until(lambda: served.broker.is_running and not served.broker.is_slave)
            yield served


async def test_metadata_changes_are_records_of_the_member_log(tmp_path: Path) -> None:
    """A topic created, a group committing, the topic deleted: each answered once applied,
    each a record of the metadata topic in the member's committed log; a re-created topic
    starts its queue at 0."""
    async with _leading(tmp_path) as served:
        client = served.client
        created = await client.post("/v1/topics", json={"name": "T", "write_queue_count": 1,
                                                        "read_queue_count": 1})
        assert created.status_code == 201, created.text
        for number in range(3):
            put = await client.post("/v1/topics/T/messages", json={"body": f"m{number}"})
            assert put.status_code == 201, put.text
        wait_until(lambda: served.broker.store.queue_offset_range("T", 0) == (0, 3))
        committed = await client.put("/v1/groups/g/offsets/T/queues/0", json={"offset": 2})
        assert committed.status_code == 200, committed.text
        deleted = await client.delete("/v1/topics/T")
        assert deleted.status_code == 204, deleted.text
        store = served.broker.store
        records = store.get_messages(METADATA_TOPIC, 0, 0, 100).messages
        assert [record.properties[PROPERTY_OP] for record in records][-1] == "topic.delete"
        assert len(records) >= 4  # the create, the group, the offset, the delete
        assert served.broker.metadata_store.log_position.queue_offset == len(records)
        again = await client.post("/v1/topics/T/messages", json={"body": "new"})
        assert again.status_code == 201, again.text  # the topic auto-created again
        assert again.json()["queue_offset"] == 0


async def test_a_record_the_member_cannot_apply_makes_it_not_ready(tmp_path: Path) -> None:
    """A committed metadata record this member cannot apply holds its dispatch: /readyz
    answers 503 naming it, and twinlog_dispatch_errors_total counts it (the classic path's
    readiness, on a DLedger member)."""
    async with _leading(tmp_path) as served:
        member = served.broker.dledger
        assert member is not None
        put = member.put(Message(METADATA_TOPIC, b'{"v": 99}', queue_id=0,
                                 properties={PROPERTY_OP: "topic.put"}))
        put.future.wait(10)
        wait_until(lambda: served.broker.store.dispatch.failing)
        ready = await served.client.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert "dispatch fails" in ready.json()["detail"]
        metrics = (await served.client.get("/metrics")).text
        errors = [line for line in metrics.splitlines()
                  if line.startswith("twinlog_dispatch_errors_total ")]
        assert errors and float(errors[0].split()[1]) >= 1


async def test_a_start_with_another_peer_list_is_refused_unless_overridden(
        tmp_path: Path) -> None:
    """The first start stores the membership; a start naming other members is refused with
    both lists; with dledger_membership_override it starts and stores the new list."""
    async with _leading(tmp_path):
        pass
    with _bound() as bound:
        port = bound.getsockname()[1]
        bound.close()
        wider = f"n0-127.0.0.1:{port};n1-127.0.0.1:1"
        with pytest.raises(MembershipMismatch) as refused:
            async with serving(_settings(tmp_path, port, wider)):
                pass
        assert "peers n0-127.0.0.1:" in str(refused.value)
        assert f"peers {wider}" in str(refused.value)
        started = time.monotonic()
        async with serving(_settings(tmp_path, port, wider,
                                     dledger_membership_override=True)) as served:
            assert served.broker.is_running
        assert time.monotonic() - started < 30
        async with serving(_settings(tmp_path, port, wider)) as served:
            assert served.broker.is_running  # the new list is the stored one now


async def test_a_batch_of_topics_is_one_entry_or_nothing(tmp_path: Path) -> None:
    """With message_size_max_bytes 4096, 20 topics made two records before (one entry each,
    of which a leader change could commit the first alone): they are one entry now, all
    created. 60 topics do not fit one record: 400 naming how many fit, nothing written."""
    async with _leading(tmp_path, message_size_max_bytes=4096) as served:
        member = served.broker.dledger
        assert member is not None
        store = served.broker.store
        before = len(store.get_messages(METADATA_TOPIC, 0, 0, 1000).messages)
        end_before = member.status().end_index
        batch = {"topics": [{"name": f"batch-{number:03d}"} for number in range(20)]}
        created = await served.client.post("/v1/topics:batch", json=batch)
        assert created.status_code == 201, created.text
        assert member.status().end_index == end_before + 1
        records = store.get_messages(METADATA_TOPIC, 0, 0, 1000).messages
        assert [r.properties[PROPERTY_OP] for r in records[before:]] == ["topics.put"]
        too_many = {"topics": [{"name": f"many-{number:03d}"} for number in range(60)]}
        refused = await served.client.post("/v1/topics:batch", json=too_many)
        assert refused.status_code == 400, refused.text
        assert "send at most about" in refused.json()["detail"]
        assert member.status().end_index == end_before + 1
        listed = (await served.client.get("/v1/topics")).json()["topics"]
        assert not [t for t in listed if t["name"].startswith("many-")]
        assert len([t for t in listed if t["name"].startswith("batch-")]) == 20
