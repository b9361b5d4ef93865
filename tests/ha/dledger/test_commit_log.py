"""DLedgerCommitLog, the broker's write path in DLedger mode, over a real store and a real
peer port: a one-member group commits on its own, so each AppendStatus reaches the put."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha.dledger.commit_log import DLedgerCommitLog
from ha.dledger.core.actions import AppendStatus
from ha.dledger.core.peers import Peer
from ha.dledger.core.put_status import PUT_STATUS_OF_APPEND, put_status_of
from ha.dledger.host.host_config import HostConfig
from ha.dledger.host.transport_config import TransportConfig
from store import BrokerRole, Message, MessageStore, PutMessageStatus
from store.status import AppendRawStatus
from tests.support.dledger.stored import dledger_config
from tests.support.store import wait_until

HOST = HostConfig(tick_ms=10, election_timeout_ms=50, heartbeat_interval_ms=20)


def test_every_append_status_has_a_put_status() -> None:
    """Each AppendStatus maps to a PutMessageStatus: OK stored, the indeterminate ones
    stored-but-unconfirmed (COMMIT_INDETERMINATE), every refusal not stored."""
    assert set(PUT_STATUS_OF_APPEND) == set(AppendStatus)
    for status in AppendStatus:
        put_status, detail = put_status_of(status)
        assert put_status.is_stored is (status is AppendStatus.OK or status.indeterminate)
        assert (detail == "") is (status is AppendStatus.OK)
    assert put_status_of(AppendStatus.LEADER_PENDING_FULL)[0] is \
        PutMessageStatus.OS_PAGE_CACHE_BUSY


@pytest.fixture
def member(tmp_path: Path) -> Iterator[DLedgerCommitLog]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = dataclasses.replace(dledger_config(tmp_path), broker_role=BrokerRole.SLAVE)
    transport = TransportConfig("g", "n0", (Peer("n0", "127.0.0.1", port),),
                                secret=b"a-group-secret")
    started = DLedgerCommitLog(MessageStore(config, commit_limited=True), transport, HOST,
                               listener)
    started.start()
    deadline = time.monotonic() + 10
    while not started.is_leader:
        assert time.monotonic() < deadline, "a one-member group elects itself"
        time.sleep(0.01)
    yield started
    started.stop()


def test_a_committed_put_answers_put_ok_with_its_position(member: DLedgerCommitLog) -> None:
    """A put commits and its result names where the record is; the store reads it back; the
    member counts each put once, however often its outcome is asked."""
    put = member.put(Message("T", b"hello", queue_id=1))
    put.future.result(10)
    result, status = put.outcome()
    assert status is PutMessageStatus.PUT_OK
    assert (result.queue_id, result.queue_offset, result.commit_log_offset) == (1, 0, 0)
    assert result.wrote_bytes > 5 and result.msg_id
    second = member.put(Message("T", b"again", queue_id=1))
    second.future.result(10)
    assert second.outcome()[0].commit_log_offset == result.wrote_bytes
    limit = second.outcome()[0].end_offset
    wait_until(lambda: member.store.dispatch.dispatched_offset >= limit)
    found = member.store.get_messages("T", 1, 0, 10, max_bytes=1 << 20).messages
    assert [message.body for message in found] == [b"hello", b"again"]
    counts = member.put_counts
    assert counts.by_status == {PutMessageStatus.PUT_OK: 2}
    assert counts.stored_bytes_total == result.wrote_bytes + second.outcome()[0].wrote_bytes


def test_a_refused_record_is_a_put_status_and_appends_nothing(
        member: DLedgerCommitLog) -> None:
    """A message the leader cannot encode (queue id out of range) answers MESSAGE_ILLEGAL and
    leaves the log as it was."""
    end_before = member.status().end_index
    put = member.put(Message("T", b"x", queue_id=500))
    with pytest.raises(Exception):  # noqa: B017 (the future carries the refusal)
        put.future.result(10)
    result, status = put.outcome()
    assert status is PutMessageStatus.MESSAGE_ILLEGAL and "queue_id" in result.detail
    assert member.status().end_index == end_before


def test_a_run_of_puts_is_appended_as_a_prefix(member: DLedgerCommitLog) -> None:
    """Puts each made `after` the one before: once one is refused, the ones after it are not
    appended (even those the leader could encode), so the run leaves no hole in the log; a
    put fenced by another term than the leader's is refused."""
    end_before = member.status().end_index
    first = member.put(Message("T", b"a", queue_id=0))
    refused = member.put(Message("T", b"b", queue_id=500), after=first)
    after_refused = member.put(Message("T", b"c", queue_id=0), after=refused)
    statuses = []
    for put in (first, refused, after_refused):
        put.future.wait(10)
        statuses.append(put.outcome()[1])
    assert statuses == [PutMessageStatus.PUT_OK, PutMessageStatus.MESSAGE_ILLEGAL,
                        PutMessageStatus.SERVICE_NOT_AVAILABLE]
    assert member.status().end_index == end_before + 1
    term = member.leading_term()
    assert term is not None
    stale = member.put(Message("T", b"d", queue_id=0), term=term - 1)
    stale.future.wait(10)
    assert stale.outcome()[1] is PutMessageStatus.SERVICE_NOT_AVAILABLE
    current = member.put(Message("T", b"e", queue_id=0), term=term)
    current.future.wait(10)
    assert current.outcome()[1] is PutMessageStatus.PUT_OK


def test_a_disk_that_refuses_the_entry_answers_disk_error(
        member: DLedgerCommitLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry the disk refuses (the store's write fails: EntryWriteError) answers
    DISK_ERROR, a 503 put status, leaves the log as it was, and the member goes on taking the
    next put."""
    store = member.storage.store
    real_write = store.write_entry_record
    refusals = [AppendRawStatus.STORE_NOT_WRITABLE]

    def write_entry_record(position: int, records: bytes) -> AppendRawStatus:
        if refusals:
            return refusals.pop()
        return real_write(position, records)

    monkeypatch.setattr(store, "write_entry_record", write_entry_record)
    end_before = member.status().end_index
    refused = member.put(Message("T", b"lost", queue_id=0))
    assert refused.future.result(10).status is AppendStatus.DISK_ERROR
    assert refused.outcome()[1] is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert member.status().end_index == end_before
    fine = member.put(Message("T", b"kept", queue_id=0))
    assert fine.future.result(10).status is AppendStatus.OK
    assert member.server.host.last_error is None


def test_puts_awaited_in_asyncio_answer_their_outcomes(member: DLedgerCommitLog) -> None:
    """`await put` (the gateway's way) gives each put its own outcome: committed puts in
    append order, a refused one its refusal, and an already decided put at once."""

    async def produce() -> list[tuple[int, PutMessageStatus]]:
        puts = [member.put(Message("A", b"m%d" % i, queue_id=0)) for i in range(20)]
        puts.append(member.put(Message("A", b"bad", queue_id=99)))
        outcomes = [await put for put in puts]
        again = await puts[0]  # decided already: no wait, the same outcome
        assert again == outcomes[0]
        return [(result.queue_offset, status) for result, status in outcomes]

    outcomes = asyncio.run(asyncio.wait_for(produce(), 30))
    assert outcomes[:20] == [(i, PutMessageStatus.PUT_OK) for i in range(20)]
    assert outcomes[20][1] is PutMessageStatus.MESSAGE_ILLEGAL
